"""Gradient compression, spelled as Horovod spells it (hvd.Compression.fp16),
plus bf16: compress before the collective, decompress after."""

import torch


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx) -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    """Floating-point tensors travel as `wire`; others unchanged."""

    wire = None

    @classmethod
    def compress(cls, tensor):
        return (tensor.type(cls.wire) if tensor.dtype.is_floating_point else tensor), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx.is_floating_point else tensor


class FP16Compressor(_CastCompressor):
    wire = torch.float16


class BF16Compressor(_CastCompressor):
    """Half the bytes like fp16, with float32's range (no overflow in big gradients)."""

    wire = torch.bfloat16


class Compression:
    """Horovod's names: Compression.none, Compression.fp16; ours: Compression.bf16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def from_name(compression):
    """A compressor from Horovod's class or smb.torch's names (None, "fp16", "bf16")."""
    if compression is None or compression == "none":
        return Compression.none
    if isinstance(compression, str):
        try:
            return getattr(Compression, compression)
        except AttributeError:
            raise ValueError(f"unknown compression {compression!r}: none, fp16 or bf16") from None
    return compression
