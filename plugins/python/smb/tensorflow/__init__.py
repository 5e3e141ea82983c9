"""smb.tensorflow: Horovod's TensorFlow API over the Soft Memory Box fabric.

    import smb.tensorflow as hvd          # was: import horovod.tensorflow as hvd
    hvd.init()
    with tf.GradientTape() as tape:
        loss = ...
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)   # averaged over every rank
    hvd.broadcast_variables(model.variables, root_rank=0)

Keras: hvd.DistributedOptimizer(keras_optimizer), the callbacks
hvd.callbacks.BroadcastGlobalVariablesCallback(0) and
hvd.callbacks.FabricExchangeCallback(mode="seasgd", tau=1, alpha=0.2)
(ETRI's hybrid exchange with global weights in the memory servers).

Tensors travel as NumPy arrays (eager CPU tensors convert in place where
TensorFlow allows) through smb.collective.numpy_ops, the same
framework-neutral collectives smb.torch uses; inside tf.function they run
through tf.py_function. Written against TensorFlow 2's public API, but NOT
run against a real TensorFlow: none can be installed where this was built
(see docs/plugins.md). The framework-neutral parts are tested with NumPy.
"""

import numpy as np
import tensorflow as tf

from smb.collective import numpy_ops
from smb.collective.basics import (cross_rank, cross_size, init, is_initialized, local_rank, local_size, rank,
                                   shutdown, size)
from smb.collective.fabric import HorovodInternalError
from smb.collective.process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set

from . import callbacks  # noqa: F401 - hvd.callbacks.*

Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_OPS = {Average: "average", Sum: "sum", Min: "min", Max: "max", Product: "product"}


class Compression:
    """Horovod's Compression.none / .fp16, plus bf16."""

    class none:
        @staticmethod
        def compress(t):
            return t, None

        @staticmethod
        def decompress(t, ctx):
            return t

    class _Cast:
        wire = None

        @classmethod
        def compress(cls, t):
            return (tf.cast(t, cls.wire) if t.dtype.is_floating else t), t.dtype

        @staticmethod
        def decompress(t, ctx):
            return tf.cast(t, ctx) if ctx.is_floating else t

    class fp16(_Cast):
        wire = tf.float16

    class bf16(_Cast):
        wire = tf.bfloat16


def _op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by smb.tensorflow: use hvd.Average")
    return _OPS[op]


def _run(fn, tensor, out_dtype=None):
    """fn(numpy array) -> numpy array, eagerly or inside a graph."""
    if tf.executing_eagerly():
        return tf.convert_to_tensor(fn(np.asarray(tensor)))
    return tf.py_function(lambda t: fn(t.numpy()), [tensor], Tout=out_dtype or tensor.dtype)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set):
    """The reduction (default: average) of `tensor` over the set."""
    reduce_op = _op(op, average)
    if isinstance(tensor, tf.IndexedSlices):  # gathered, then densified by the caller's op
        values = allgather(tensor.values, name=f"{name}.values" if name else None, process_set=process_set)
        indices = allgather(tensor.indices, name=f"{name}.indices" if name else None, process_set=process_set)
        if reduce_op == "average":
            values = values / process_set.size()
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    compressed, ctx = compression.compress(tensor)
    reduced = _run(lambda a: numpy_ops.allreduce(a, reduce_op, name, prescale_factor, postscale_factor,
                                                 process_set), compressed)
    return compression.decompress(reduced, ctx)


def grouped_allreduce(tensors, average=None, compression=Compression.none, op=None, name=None,
                      process_set=global_process_set):
    """Each tensor reduced (one collective each, named by position)."""
    return [allreduce(t, average=average, compression=compression, op=op,
                      name=f"{name}.{i}" if name else None, process_set=process_set) for i, t in enumerate(tensors)]


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation over the set along the first dimension."""
    return _run(lambda a: numpy_ops.allgather(a, name, process_set), tensor)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """The root's tensor on every rank."""
    return _run(lambda a: numpy_ops.broadcast(a, root_rank, name, process_set), tensor)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[i] go to set rank i; returns (received rows, received splits)."""
    out, received = numpy_ops.alltoall(np.asarray(tensor), None if splits is None else [int(s) for s in splits],
                                       name, process_set)
    return tf.convert_to_tensor(out), tf.constant(received, dtype=tf.int32)


def reducescatter(tensor, op=Average, name=None, process_set=global_process_set):
    return _run(lambda a: numpy_ops.reducescatter(a, _OPS[op], name, process_set=process_set), tensor)


def barrier(process_set=global_process_set):
    numpy_ops.barrier(process_set)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    return numpy_ops.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    return numpy_ops.allgather_object(obj, name, process_set)


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Every variable takes the root's value (names by position, the same on every rank)."""
    for i, v in enumerate(variables):
        v.assign(broadcast(v, root_rank, name=f"broadcast_variables.{i}", process_set=process_set))


class DistributedGradientTape:
    """Wraps a tf.GradientTape: gradient() returns gradients averaged (by
    `op`) over the set, each reduced as soon as TensorFlow returns it."""

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set):
        self._tape = gradtape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = gradient_predivide_factor
        self._process_set = process_set

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        return _reduce_gradients(grads, self._op, self._compression, self._sparse_as_dense, self._predivide,
                                 self._process_set)


def _reduce_gradients(grads, op, compression, sparse_as_dense, predivide, process_set):
    out = []
    for i, g in enumerate(grads):
        if g is None:
            out.append(None)
            continue
        if sparse_as_dense and isinstance(g, tf.IndexedSlices):
            g = tf.convert_to_tensor(g)
        pre, post = (1.0 / predivide, predivide) if op == Average else (1.0, 1.0)
        out.append(allreduce(g, op=op, compression=compression, prescale_factor=pre, postscale_factor=post,
                             name=f"gradient.{i}", process_set=process_set))
    return out


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set):
    """A Keras optimizer whose apply_gradients() first averages the gradients
    over the set (a subclass of the optimizer's own class)."""
    base = optimizer.__class__

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        reduced = _reduce_gradients([g for g, _ in grads_and_vars], op, compression, sparse_as_dense,
                                    gradient_predivide_factor, process_set)
        return base.apply_gradients(self, list(zip(reduced, [v for _, v in grads_and_vars])), *args, **kwargs)

    cls = type(base.__name__, (base,), {"apply_gradients": apply_gradients})
    return cls.from_config(optimizer.get_config())
