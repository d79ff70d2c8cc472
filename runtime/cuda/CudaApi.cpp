//===- CudaApi.cpp - dlopen/dlsym of libcudart, libcublasLt and libnccl ---===//

#include "runtime/cuda/CudaApi.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace trainc::rt::cuda {
namespace {

void *openLibrary(const char *envVar, const char *defaultName, std::string *error) {
  const char *env = std::getenv(envVar);
  const char *name = env && *env ? env : defaultName;
  void *h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = ::dlerror();
    *error = std::string("cannot load ") + name + " (" + (why ? why : "unknown dlopen error") +
             ")" + (env && *env ? std::string(", from ") + envVar : std::string());
  }
  return h;
}

template <typename F> bool resolve(void *lib, const char *name, F &fn, std::string *error) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  if (!fn && error->empty())
    *error = std::string("symbol ") + name + " not found in the loaded library";
  return fn != nullptr;
}

struct Loaded {
  CudaApi api;
  std::string error; // "" when usable
  std::mutex ncclMu;
  bool ncclTried = false;
  std::string ncclError;
};

Loaded &loaded() {
  static Loaded *l = [] {
    auto *s = new Loaded; // never destroyed: kernels may be in flight at exit
    std::string &err = s->error;
    void *rt = openLibrary("TRAINC_CUDART_LIBRARY", "libcudart.so.13", &err);
    if (!rt)
      return s;
#define TRAINC_RESOLVE(f) resolve(rt, #f, s->api.f, &err);
    TRAINC_CUDART_FUNCS(TRAINC_RESOLVE)
    TRAINC_CUDART_OVERLOADED(TRAINC_RESOLVE)
#undef TRAINC_RESOLVE
    if (!err.empty()) {
      err = "libcudart: " + err;
      return s;
    }
    int count = 0;
    cudaError_t e = s->api.cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      err = "no CUDA device: cudaGetDeviceCount failed with " + cudaErrorText(s->api, e);
      return s;
    }
    if (count == 0) {
      err = "no CUDA device: cudaGetDeviceCount found 0 devices";
      return s;
    }
    std::string ltErr;
    void *lt = openLibrary("TRAINC_CUBLASLT_LIBRARY", "libcublasLt.so.13", &ltErr);
    if (!lt) {
      err = ltErr;
      return s;
    }
#define TRAINC_RESOLVE(f) resolve(lt, #f, s->api.f, &ltErr);
    TRAINC_CUBLASLT_FUNCS(TRAINC_RESOLVE)
#undef TRAINC_RESOLVE
    if (!ltErr.empty()) {
      err = "libcublasLt: " + ltErr;
      return s;
    }
    s->api.haveCublasLt = true;
    return s;
  }();
  return *l;
}

} // namespace

std::string cudaErrorText(const CudaApi &api, cudaError_t e) {
  std::string name = api.cudaGetErrorName ? api.cudaGetErrorName(e) : "cudaError";
  std::string text = api.cudaGetErrorString ? api.cudaGetErrorString(e) : "";
  return name + " (" + std::to_string(int(e)) + ": " + text + ")";
}

const CudaApi *loadCudaApi(std::string *error) {
  Loaded &l = loaded();
  if (!l.error.empty()) {
    if (error)
      *error = l.error;
    return nullptr;
  }
  return &l.api;
}

std::string loadNccl() {
  Loaded &l = loaded();
  if (!l.error.empty())
    return l.error;
  std::lock_guard<std::mutex> g(l.ncclMu);
  if (l.ncclTried)
    return l.ncclError;
  l.ncclTried = true;
  void *h = openLibrary("TRAINC_NCCL_LIBRARY", "libnccl.so.2", &l.ncclError);
  if (!h)
    return l.ncclError;
#define TRAINC_RESOLVE(f) resolve(h, #f, l.api.f, &l.ncclError);
  TRAINC_NCCL_FUNCS(TRAINC_RESOLVE)
#undef TRAINC_RESOLVE
  if (!l.ncclError.empty())
    l.ncclError = "libnccl: " + l.ncclError;
  else
    l.api.haveNccl = true;
  return l.ncclError;
}

std::string probeCudaLibraries() {
  CudaApi t;
  std::string err;
  const char *env[3] = {"TRAINC_CUDART_LIBRARY", "TRAINC_CUBLASLT_LIBRARY", "TRAINC_NCCL_LIBRARY"};
  const char *names[3] = {"libcudart.so.13", "libcublasLt.so.13", "libnccl.so.2"};
  void *h[3];
  for (int i = 0; i < 3; ++i)
    if (!(h[i] = openLibrary(env[i], names[i], &err)))
      return "missing library: " + err;
#define TRAINC_RESOLVE0(f) resolve(h[0], #f, t.f, &err);
#define TRAINC_RESOLVE1(f) resolve(h[1], #f, t.f, &err);
#define TRAINC_RESOLVE2(f) resolve(h[2], #f, t.f, &err);
  TRAINC_CUDART_FUNCS(TRAINC_RESOLVE0)
  TRAINC_CUDART_OVERLOADED(TRAINC_RESOLVE0)
  TRAINC_CUBLASLT_FUNCS(TRAINC_RESOLVE1)
  TRAINC_NCCL_FUNCS(TRAINC_RESOLVE2)
#undef TRAINC_RESOLVE0
#undef TRAINC_RESOLVE1
#undef TRAINC_RESOLVE2
  return err;
}

bool cudaDevicePresent() { return loadCudaApi(nullptr) != nullptr; }

} // namespace trainc::rt::cuda
