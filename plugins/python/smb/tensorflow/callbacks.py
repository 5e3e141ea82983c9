"""Keras callbacks for smb.tensorflow (hvd.callbacks.*)."""

import numpy as np
import tensorflow as tf

import smb
from smb.collective import basics, numpy_ops


class BroadcastGlobalVariablesCallback(tf.keras.callbacks.Callback):
    """At the start of training every rank takes the root's model and
    optimizer variables (Horovod's callback of the same name)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.done = False

    def on_batch_end(self, batch, logs=None):
        # After the first batch: the optimizer's slots exist by then.
        if self.done:
            return
        variables = list(self.model.variables) + list(getattr(self.model.optimizer, "variables", lambda: [])())
        for i, v in enumerate(variables):
            v.assign(numpy_ops.broadcast(np.asarray(v), self.root_rank, name=f"keras.broadcast.{i}"))
        self.done = True


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Averages the epoch's metrics over every rank before they are logged."""

    def on_epoch_end(self, epoch, logs=None):
        for key in sorted(logs or {}):
            logs[key] = float(numpy_ops.allreduce(np.array([logs[key]], dtype=np.float64), name=f"metric.{key}")[0])


class FabricExchangeCallback(tf.keras.callbacks.Callback):
    """ETRI's hybrid exchange (an addition to Horovod's API): every `tau`
    steps the group's root exchanges the model's weights with global weights
    held in the memory servers (mode "seasgd", "downpour" or "sync", through
    smb.UpdateEngine) and the group adopts the result. Use it with
    DistributedOptimizer(process_set=<this rank's group>) so that the group
    averages gradients every step, or alone for per-rank exchanges."""

    def __init__(self, mode="seasgd", tau=1, alpha=0.2, group_servers=None):
        super().__init__()
        self.mode, self.tau, self.alpha = mode, tau, alpha
        self.group_servers = group_servers
        self.engine = None
        self.flat = None

    def _weights(self):
        return [np.asarray(w, dtype=np.float32) for w in self.model.get_weights()]

    def on_train_begin(self, logs=None):
        st = basics.state()
        shapes = self._weights()
        self.shapes = [w.shape for w in shapes]
        self.flat = np.zeros(sum(w.size for w in shapes), dtype=np.float32)
        self.engine = smb.UpdateEngine(st.client, f"{st.job}/keras-engine", self.flat.size, mode=self.mode,
                                       groups=st.cross_size, group=st.cross_rank, group_size=st.local_size,
                                       group_rank=st.local_rank, alpha=self.alpha, tau=self.tau,
                                       group_servers=self.group_servers or basics.group_servers())
        self._gather()
        self.engine.initialize(self.flat)
        self._scatter()

    def _gather(self):
        at = 0
        for w in self._weights():
            self.flat[at:at + w.size] = w.reshape(-1)
            at += w.size

    def _scatter(self):
        out, at = [], 0
        for shape in self.shapes:
            n = int(np.prod(shape))
            out.append(self.flat[at:at + n].reshape(shape))
            at += n
        self.model.set_weights(out)

    def on_train_batch_end(self, batch, logs=None):
        self._gather()
        self.engine.after_step(self.flat)  # every tau steps: the exchange with the global weights
        self._scatter()
