"""smb.torch.elastic: Horovod's elastic API (horovod.torch.elastic), with the
job's state kept in the fabric's memory servers.

    import smb.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        ...
        state.commit()

Launch with smbrun --min-np/--max-np (or --host-discovery-script): see
docs/plugins.md, "Elastic training".
"""

from smb.collective.fabric import HorovodInternalError

from .runner import run
from .sampler import ElasticSampler
from .state import HostsUpdatedInterrupt, ObjectState, State, TorchState

__all__ = ["run", "ElasticSampler", "HostsUpdatedInterrupt", "HorovodInternalError", "ObjectState", "State",
           "TorchState"]
