/* Build facts for weft_info and bug reports. */
#include "weft_internal.h"

WEFT_API const char *weft_build_info(void)
{
    return "version=" PACKAGE_VERSION
#ifdef WEFT_HAVE_CUDA
           " cuda=headers-found(" WEFT_CUDA_DIR ";no-gpu-paths-yet)"
#else
           " cuda=no"
#endif
           " threads=funneled"
           " compiler=" __VERSION__;
}
