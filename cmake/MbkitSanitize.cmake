# Sanitizer and fuzzing builds.
#
# -DMBKIT_SANITIZE=address,undefined (any -fsanitize= list GCC or Clang takes) instruments the
# library, the tools and the tests. An UndefinedBehaviorSanitizer finding aborts the process
# (-fno-sanitize-recover), so it fails the test that met it. Run the tests with the options and
# suppressions of tests/sanitizers/env.sh (leaks inside Open MPI, hwloc and oneDNN are not
# ours): `. tests/sanitizers/env.sh && ctest --test-dir build-san -L unit`.
#
# -DMBKIT_FUZZ=ON (Clang only) adds coverage instrumentation for libFuzzer to every object and
# builds the targets of tests/fuzz/ (CTest label "fuzz").
set(MBKIT_SANITIZE "" CACHE STRING
    "Build with these sanitizers, a -fsanitize= list such as address,undefined (empty: none)")
option(MBKIT_FUZZ "Build the libFuzzer targets of tests/fuzz (Clang only)" OFF)

if(MBKIT_SANITIZE)
  if(NOT MBKIT_SANITIZE MATCHES "^[a-z,-]+$")
    message(FATAL_ERROR "MBKIT_SANITIZE=${MBKIT_SANITIZE}: expected a list such as address,undefined")
  endif()
  # C and C++ only: CUDA sources (nvcc) are not instrumented.
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${MBKIT_SANITIZE};-fno-omit-frame-pointer>")
  add_link_options(-fsanitize=${MBKIT_SANITIZE})
  if(MBKIT_SANITIZE MATCHES "undefined")
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>")
    # UBSan checks every load and store (null, alignment, object size), which keeps Clang from
    # vectorising the `omp simd` loops, and Clang warns for each. The loops vectorise in every
    # build without UBSan; this one finds bugs, not speed, so the warning is off and -Werror
    # (MBKIT_WERROR) can hold for the rest.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-Wno-pass-failed>")
    endif()
  endif()
endif()

if(MBKIT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MBKIT_FUZZ needs Clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>")
endif()
