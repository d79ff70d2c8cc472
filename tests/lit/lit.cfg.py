# lit configuration for trainc: .mlir and .test files, FileCheck, and the trainc tools on PATH.
import os
import lit.formats

config.name = "trainc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.trainc_obj_root, "tests", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]
config.substitutions.append(("FileCheck", config.filecheck))
config.substitutions.append(("%not", config.not_tool))
config.environment["PATH"] = os.pathsep.join(
    [config.trainc_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
if config.trainc_enable_compiler:
    config.available_features.add("compiler")
# cuda-build: the binaries have the CUDA backend (nvcc was found); nvidia-gpu: this machine has
# an NVIDIA device node (tests of the no-GPU error are unsupported there).
if getattr(config, "trainc_have_cuda", False):
    config.available_features.add("cuda-build")
if os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl"):
    config.available_features.add("nvidia-gpu")
# The suite's references are CPU runs: trainrun's default backend is cpu here even on a GPU
# machine (tests of --backend pass it explicitly; unset TRAINC_BACKEND to test the default).
config.environment["TRAINC_BACKEND"] = "cpu"
