"""What ops-transformer's two 950 MTE quant kernels share: ``utils.h`` and ``vec_comp.h``.

QuantReduceScatter (``mc2/quant_reduce_scatter/op_kernel/``) defines them, and
QuantAllReduce includes them from there; so do ``mc2_quant_reduce_scatter.py`` and
``mc2_quant_all_reduce.py`` from here. ``mte_comm.h`` (the window copies, statuses
and flags) stays in each sample: it holds the ordering calls the mutation suite
removes, and the suite mutates sample files only.
"""

import torch

import hccl_py as hp

PER_GROUP_SIZE = 128  # KG quantisation: 128 x share one scale
MX_SIZE = 32  # MX quantisation: 32 x share one scale
MX_SCALE_TRANS_NUM = 32  # E8M0 scales one VF_CALL<CastVf> converts
fp8_e8m0_t = torch.float8_e8m0fnu


# ---------------------------------------------------------------- utils.h
def CeilDiv(a: int, b: int) -> int:
    return (a + b - 1) // b if b else 0


CeilDivU32 = CeilDiv


def CeilAlignU32(a: int, b: int) -> int:
    return CeilDivU32(a, b) * b if b else a


def BlockAlignMod(a: int, b: int) -> int:
    """``a % b``, or ``b`` when that is 0: the size of the last block."""
    if b == 0:
        return 0
    return a % b or b


def FloorAlign(a: int, b: int) -> int:
    return a // b * b if b else a


def FracDiv(total: int, base: int, num: int, den: int) -> int:
    """``total / (base + num / den)`` without truncating the fraction."""
    return total * num // (base * num + den)


def CastVf(src: torch.Tensor) -> torch.Tensor:
    """The E8M0 -> BF16 micro-op (2 ** (e - 127) is exact in BF16)."""
    return src.to(torch.bfloat16)


def gm(addr: hp.GmAddr, dtype: torch.dtype, count: int) -> torch.Tensor:
    """A GlobalTensor of ``count`` elements at ``addr``."""
    return hp.gm_tensor(addr, dtype, count)


# ---------------------------------------------------------------- vec_comp.h
class VectorCompute:
    """``VectorCompute<XType, ScalesType, OutputType>``: dequantise a block, add it to the sum.

    The UB tensors it takes hold a whole block (``SetBlockSize``); the lanes past a
    short last block are zeros and add nothing.
    """

    def __init__(self, XType: torch.dtype, ScalesType: torch.dtype, OutputType: torch.dtype):
        self.XType, self.ScalesType, self.OutputType = XType, ScalesType, OutputType

    def SetBlockSize(self, elementsPerBlock: int) -> None:
        self.xNumPerBlock_ = elementsPerBlock

    def SetScaleNums(self, n: int) -> None:
        self.scaleNumsPerBlock_ = n

    def CastToFloat(self, xTensor: torch.Tensor, scaleTensor: torch.Tensor) -> None:
        if self.XType == torch.int8:
            # int8 -> half -> float (the int8 values are exact in half)
            self.xCastTemp_ = xTensor.to(torch.float16).to(torch.float32)
        else:
            self.xCastTemp_ = xTensor.to(torch.float32)  # FP8 -> float
        if self.ScalesType == fp8_e8m0_t:
            # MX: E8M0 -> BF16 (VF_CALL<CastVf>, 32 scales a call) -> float, broadcast over 32
            totalScaleNum = self.xNumPerBlock_ // MX_SIZE
            scaleLoopCnt, scaleTailNum = divmod(totalScaleNum, MX_SCALE_TRANS_NUM)
            tempBf16Scale = torch.zeros(totalScaleNum, dtype=torch.bfloat16)
            for loopIdx in range(scaleLoopCnt + (scaleTailNum > 0)):
                part = slice(loopIdx * MX_SCALE_TRANS_NUM, (loopIdx + 1) * MX_SCALE_TRANS_NUM)
                tempBf16Scale[part] = CastVf(scaleTensor[:totalScaleNum][part])
            castLocalScale = tempBf16Scale.to(torch.float32)
            group = MX_SIZE
        else:
            # KG: the scales are float already (ReinterpretCast), broadcast over 128
            totalScaleNum = self.xNumPerBlock_ // PER_GROUP_SIZE
            castLocalScale = scaleTensor[:totalScaleNum]
            group = PER_GROUP_SIZE
        self.scaleCalTensor_ = castLocalScale[:, None].expand(totalScaleNum, group).reshape(-1)

    def DequantReduceSum(self, xTensor, scaleTensor, sumTensor: torch.Tensor) -> None:
        self.CastToFloat(xTensor, scaleTensor)
        self.xCastTemp_ = self.xCastTemp_ * self.scaleCalTensor_  # Mul: dequantise
        sumTensor += self.xCastTemp_  # Add: accumulate
