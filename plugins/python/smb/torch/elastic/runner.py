"""hvd.elastic.run: the training function, called again after the job re-forms.

On HorovodInternalError (a collective or a commit failed: a member died)
or HostsUpdatedInterrupt (workers joined or left, seen at a commit), the
job forms again at smbrun's newest round: new rank() and size(), a new
global process set. Then every member is brought to the fabric's last
commit (a member already at it reads nothing, a new one reads it all), the
reset callbacks run, and the function is called again. Horovod restores
each rank from its own memory and broadcasts rank 0's state; here the
state comes from the servers, so losing rank 0 loses nothing.
"""

import functools
import logging
import os
import time

import smb
from smb.collective import basics
from smb.collective.elastic import WorkerLeft
from smb.collective.fabric import HorovodInternalError

from .state import HostsUpdatedInterrupt

log = logging.getLogger("smb.torch.elastic")


# Failures of the fabric under a member (a server lost, an op that timed
# out): the job forms again, on the servers that are left.
_FABRIC_LOSSES = (smb.ServerGone, smb.Unreachable, smb.DataLost, smb.Timeout)


def _ask_for_a_round(error):
    """Unless smbrun already published a round that every member must form
    (a worker left), ask it for one: this member cannot go on in its round."""
    job = basics.state().elastic
    if isinstance(error, WorkerLeft):
        return
    try:
        job.request_reform(str(error))
    except smb.Error as e:
        log.warning("smb.torch elastic: could not ask smbrun for a new round (%s)", e)


def run(func):
    """Decorator: func(state, *args, **kwargs) runs until it returns, across
    failures of members and changes of the job's workers."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        limit = int(os.environ.get("SMB_ELASTIC_RESET_LIMIT", "0") or 0)
        resets = 0
        while True:
            try:
                state.sync()
                state.reset()   # on every member, also the first time: a joining member meets the others here
                # The callbacks run on every member of every formation but the
                # job's first: a member that just joined runs them too, so
                # that all apply them to the same committed state.
                if resets or basics.state().elastic.round.number > 1:
                    state.on_reset()
                return func(state, *args, **kwargs)
            except (HorovodInternalError, *_FABRIC_LOSSES) as e:
                log.warning("smb.torch elastic: %s; forming the job again from the last commit", e)
                state._at_seq = None  # the state moved on since the last commit
                _ask_for_a_round(e)
            except HostsUpdatedInterrupt:
                log.info("smb.torch elastic: the job's workers changed; forming it again")
            resets += 1
            if limit and resets > limit:
                raise HorovodInternalError(f"the job re-formed {resets} times, more than --reset-limit {limit}")
            started = time.monotonic()
            rt = basics.reform()
            log.warning("smb.torch elastic: rank %d of %d at round %d (formed in %.2f s)", rt.rank, rt.size,
                        rt.elastic.round.number, time.monotonic() - started)

    return wrapper
