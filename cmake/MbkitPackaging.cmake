# Installation for other programs and a Debian package.
#
# find_package(mbkit): the exported target mbkit::core and a version file, under
# <libdir>/cmake/mbkit. HDF5's include directories and libraries are recorded as the absolute
# paths this build found (Debian's libhdf5-dev), so the package config needs no FindHDF5.
include(CMakePackageConfigHelpers)
set(MBKIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mbkit)
install(EXPORT mbkitTargets NAMESPACE mbkit:: DESTINATION ${MBKIT_CMAKE_DIR})
configure_package_config_file(cmake/mbkitConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/mbkitConfig.cmake INSTALL_DESTINATION ${MBKIT_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/mbkitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/mbkitConfig.cmake
        ${CMAKE_CURRENT_BINARY_DIR}/mbkitConfigVersion.cmake DESTINATION ${MBKIT_CMAKE_DIR})

# The Debian package: `cmake --build build --target package` (or `cpack --config
# build/CPackConfig.cmake`) writes build/mbkit_<version>_amd64.deb holding everything
# `cmake --install` installs, under /usr. dpkg-shlibdeps (dpkg-dev) derives the dependencies
# from the Debian libraries the binaries link.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mbkit)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "Command-line tools for studying data-parallel training across many workers: fixed and anytime\n"
  "mini-batches, dual batch size learning, parameter-server and allreduce exchange, on MPI or\n"
  "SLURM, with HDF5 datasets, checkpoints and metric logs.")
set(CPACK_PACKAGE_CONTACT "mbkit maintainers <maintainers@users.noreply.a-seed-4e7f0255.example>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libmbkit-core is in the package itself: dpkg-shlibdeps finds it in the build's lib/.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_LIBRARY_OUTPUT_DIRECTORY})
if(MBKIT_CUDA)
  # NVIDIA's CUDA toolkit, cuDNN and NCCL (/usr/local/cuda) are not Debian packages: they are
  # named private here so that dpkg-shlibdeps accepts them, and the package does not depend on
  # them. libmbkit-cuda is opened only when a run asks for the GPU (plugin/plugin_loader).
  foreach(library ${CUDNN_LIBRARY} ${NCCL_LIBRARY})
    get_filename_component(directory ${library} DIRECTORY)
    list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${directory})
  endforeach()
  list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CUDAToolkit_LIBRARY_DIR})
endif()
# mpirun for distributed runs, gnuplot for mb-plot, Debian's Fashion-MNIST for the main job;
# the -dev packages for programs built against libmbkit-core (find_package(mbkit)).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "openmpi-bin, gnuplot-nox, dataset-fashion-mnist")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "libhdf5-dev, libopenmpi-dev, libcli11-dev, slurm-wlm, hdf5-tools, python3-h5py")
include(CPack)
