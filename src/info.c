/* Build facts for weft_info and bug reports. */
#include "weft_internal.h"

WEFT_API const char *weft_build_info(void)
{
    WEFT_API_ENTER();
    return "version=" PACKAGE_VERSION
#if defined(WEFT_HAVE_CUDA_KERNELS)
           " cuda=" WEFT_CUDA_DIR "(point-to-point: device buffers; collectives: coll/cuda among one node's ranks)"
#elif defined(WEFT_HAVE_CUDA)
           " cuda=" WEFT_CUDA_DIR "(point-to-point: device buffers; collectives: host only, no nvcc at configure)"
#else
           " cuda=no"
#endif
           " threads=funneled"
           " compiler=" __VERSION__;
}
