"""SyncBatchNorm: batch normalization with statistics over every rank's
batch (Horovod's hvd.SyncBatchNorm), on CPU and GPU tensors alike."""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from smb.collective import basics

from .ops import Sum, allgather, allreduce


class SyncBatchNorm(_BatchNorm):
    """Normalizes over the batch of all ranks together. The same arguments
    as torch.nn.BatchNorm*d; input of at least 2 dimensions (N, C, ...)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked += 1
        if not self.training and self.track_running_stats or basics.size() == 1:
            return super().forward(input)
        momentum = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                                    momentum)


class _SyncBatchNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        channels = input.shape[1]
        x = input.transpose(0, 1).reshape(channels, -1)
        count = torch.tensor([x.shape[1]], dtype=torch.float64)
        mean = x.mean(dim=1, dtype=torch.float64)
        var = x.var(dim=1, unbiased=False).double()
        counts = allgather(count, name="sync_batch_norm.count")
        means = allgather(mean.unsqueeze(0), name="sync_batch_norm.mean")
        variances = allgather(var.unsqueeze(0), name="sync_batch_norm.var")
        total = counts.sum()
        global_mean = (means * counts.unsqueeze(1)).sum(0) / total
        global_var = ((variances + (means - global_mean) ** 2) * counts.unsqueeze(1)).sum(0) / total
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * global_mean.to(running_mean.dtype))
            unbiased = global_var * total / max(float(total) - 1, 1.0)
            running_var.mul_(1 - momentum).add_(momentum * unbiased.to(running_var.dtype))
        invstd = 1.0 / torch.sqrt(global_var + eps)
        shape = [1, channels] + [1] * (input.dim() - 2)
        xhat = (input - global_mean.to(input.dtype).view(shape)) * invstd.to(input.dtype).view(shape)
        ctx.save_for_backward(xhat, weight, invstd.to(input.dtype))
        ctx.total = float(total)
        out = xhat
        if weight is not None:
            out = out * weight.view(shape) + bias.view(shape)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        xhat, weight, invstd = ctx.saved_tensors
        channels = grad_output.shape[1]
        shape = [1, channels] + [1] * (grad_output.dim() - 2)
        dims = [0] + list(range(2, grad_output.dim()))
        grad_bias = grad_output.sum(dim=dims)
        grad_weight = (grad_output * xhat).sum(dim=dims)
        scale = weight.view(shape) if weight is not None else 1.0
        # The batch's sums are the sum over every rank's part.
        sums = allreduce(torch.stack([grad_bias, grad_weight]).contiguous(), op=Sum,
                         name="sync_batch_norm.sum_dy")
        sum_dy, sum_dy_xhat = sums[0].view(shape), sums[1].view(shape)
        grad_input = scale * invstd.view(shape) * (grad_output - sum_dy / ctx.total - xhat * sum_dy_xhat / ctx.total)
        return (grad_input, grad_weight if weight is not None else None, grad_bias if weight is not None else None,
                None, None, None, None)
