/* Prints the ABI facts of whichever nccl.h it is compiled against (weft's or
 * NVIDIA's): test_symbols.sh compiles it against both and compares. */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>

#define SIZE(t)   printf("sizeof(" #t ") %zu\n", sizeof(t))
#define OFF(t, f) printf("offsetof(" #t ", " #f ") %zu\n", offsetof(t, f))
#define VAL(x)    printf(#x " %lld\n", (long long)(x))

int main(void)
{
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
    SIZE(ncclUniqueId);
    SIZE(ncclConfig_t);
    SIZE(ncclSimInfo_t);
    SIZE(ncclResult_t);
    SIZE(ncclRedOp_t);
    SIZE(ncclDataType_t);
    SIZE(ncclScalarResidence_t);
    OFF(ncclConfig_t, blocking);
    OFF(ncclConfig_t, netName);
    OFF(ncclConfig_t, splitShare);
    OFF(ncclConfig_t, commName);
    OFF(ncclConfig_t, nvlinkCentricSched);
    OFF(ncclSimInfo_t, estimatedTime);
    const int *ci = &c.blocking;
    for (int i = 0; i < 4; i++)
        printf("config.int[%d] %d\n", i, ci[i]);
    VAL(c.size);
    VAL(c.magic);
    VAL(c.version);
    VAL(c.splitShare);
    VAL(c.nvlinkCentricSched);
    printf("config pointers %d %d\n", c.netName == NULL, c.commName == NULL);
    VAL(s.size);
    VAL(s.magic);
    VAL(s.version);
    printf("s.estimatedTime %g\n", (double)s.estimatedTime);
    VAL(NCCL_VERSION_CODE);
    VAL(NCCL_VERSION(2, 28, 9));
    VAL(NCCL_VERSION(2, 8, 4));
    VAL(NCCL_UNIQUE_ID_BYTES);
    VAL(NCCL_CONFIG_UNDEF_INT);
    VAL(NCCL_SPLIT_NOCOLOR);
    VAL(NCCL_WIN_DEFAULT);
    VAL(NCCL_WIN_COLL_SYMMETRIC);
    VAL(NCCL_WIN_REQUIRED_ALIGNMENT);
    VAL(NCCL_CTA_POLICY_DEFAULT);
    VAL(NCCL_CTA_POLICY_EFFICIENCY);
    VAL(NCCL_CTA_POLICY_ZERO);
    VAL(NCCL_SHRINK_DEFAULT);
    VAL(NCCL_SHRINK_ABORT);
    VAL(NCCL_REVOKE_DEFAULT);
    VAL(ncclSuccess);
    VAL(ncclUnhandledCudaError);
    VAL(ncclSystemError);
    VAL(ncclInternalError);
    VAL(ncclInvalidArgument);
    VAL(ncclInvalidUsage);
    VAL(ncclRemoteError);
    VAL(ncclInProgress);
    VAL(ncclNumResults);
    VAL(ncclSum);
    VAL(ncclProd);
    VAL(ncclMax);
    VAL(ncclMin);
    VAL(ncclAvg);
    VAL(ncclNumOps);
    VAL(ncclMaxRedOp);
    VAL(ncclInt8);
    VAL(ncclChar);
    VAL(ncclUint8);
    VAL(ncclInt32);
    VAL(ncclInt);
    VAL(ncclUint32);
    VAL(ncclInt64);
    VAL(ncclUint64);
    VAL(ncclFloat16);
    VAL(ncclHalf);
    VAL(ncclFloat32);
    VAL(ncclFloat);
    VAL(ncclFloat64);
    VAL(ncclDouble);
    VAL(ncclBfloat16);
    VAL(ncclFloat8e4m3);
    VAL(ncclFloat8e5m2);
    VAL(ncclNumTypes);
    VAL(ncclScalarDevice);
    VAL(ncclScalarHostImmediate);
    return 0;
}
