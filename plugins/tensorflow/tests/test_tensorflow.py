#!/usr/bin/python3
"""smb.tensorflow inside every worker of a job (smbrun -np 2): collectives,
DistributedGradientTape, broadcast_variables, Keras DistributedOptimizer and
the callbacks, against real smbd. Exits 77 (CTest: skipped) with
"TensorFlow not importable: ..." where TensorFlow is absent; the
framework-neutral collectives underneath are tested with NumPy in
plugins/python/tests/test_collective_numpy.py."""

import sys

try:
    import numpy as np
    import tensorflow as tf
except ImportError as e:
    print(f"SKIP: TensorFlow not importable: {e}", flush=True)
    sys.exit(77)

import smb.tensorflow as hvd


def main():
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    s = hvd.allreduce(tf.constant([1.0, 2.0]) * (r + 1), op=hvd.Sum)
    np.testing.assert_array_equal(s.numpy(), np.array([1.0, 2.0]) * n * (n + 1) / 2)
    g = hvd.allgather(tf.fill([r + 1, 2], float(r)))
    assert g.shape[0] == n * (n + 1) // 2
    b = hvd.broadcast(tf.constant([float(r)]), root_rank=0)
    assert b.numpy()[0] == 0.0

    v = tf.Variable(tf.random.normal([3, 3], seed=r))
    hvd.broadcast_variables([v], root_rank=0)
    first = hvd.allgather_object(v.numpy().tolist())
    assert all(x == first[0] for x in first)

    w = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(r + 1))
    tape = hvd.DistributedGradientTape(tape)
    (grad,) = tape.gradient(loss, [w])
    np.testing.assert_allclose(grad.numpy(), [(n + 1) / 2] * 2)

    model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,)), tf.keras.layers.Dense(1)])
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01))
    model.compile(optimizer=opt, loss="mse")
    x = np.random.RandomState(r).rand(32, 3).astype(np.float32)
    model.fit(x, x.sum(1), epochs=1, batch_size=8, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback()])
    weights = hvd.allgather_object([w.tolist() for w in model.get_weights()])
    assert all(x == weights[0] for x in weights), "averaged gradients keep every rank's model equal"
    hvd.shutdown()
    print(f"rank {r}: OK")


if __name__ == "__main__":
    main()
