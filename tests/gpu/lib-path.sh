# Sourced by tests/gpu/run-all and run-bench: sets LD_LIBRARY_PATH so a build made elsewhere runs
# on a GPU machine. Needs $build (the build tree) and $out (where to unpack carried libraries).
#
# Carried libraries first; then cuDNN, cuBLAS and NCCL from PyTorch's NVIDIA wheels where the
# system has none (the GPU machines have them there, not in /usr/local/cuda).
# The build's own libraries too: a carried build tree's RPATH names the machine it was built on.
# MBKIT_GPU_LIBS: a folder of the Debian libraries, or tests/gpu/pack-libs's .tar.xz of them.
libs=${MBKIT_GPU_LIBS:-}
if [[ $libs == *.tar.xz ]]; then
  mkdir -p "$out/gpu-libs"
  tar -C "$out/gpu-libs" -xJf "$libs"
  libs=$out/gpu-libs
fi
lib_path=$build/lib${libs:+:$libs}
if LD_LIBRARY_PATH=$lib_path ldd "$build/lib/libmbkit-cuda.so" | grep -q "not found"; then
  if wheels=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null); then
    for dir in "$wheels"/nvidia/*/lib; do lib_path=${lib_path:+$lib_path:}$dir; done
  fi
fi
export LD_LIBRARY_PATH=${lib_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
