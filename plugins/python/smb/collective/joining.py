"""join(): a rank out of data lets the others go on without it.

The global set has a join buffer: word 0 counts joins ever (fetch_add, so
each joining rank learns its place in this epoch), word 1 takes one
server-side op per join (never mixed with the atomics on word 0: the
server's vector ops are not atomic against a client's fetch_add), then per
rank the epoch it last joined, then the joining order of the two latest
epochs. Waiting for all ranks to join is a notified wait_version.

Ranks waiting for a collective look at word 0 between the short slices
of their wait (fabric.Collective._wait_for_everyone): while some rank has
joined, a collective completes when every other rank has arrived, and an
allreduce counts the joined ranks as zeros (others raise, as Horovod's do).

When every rank has joined, all of them are inside join(), between two
barriers, and nothing is in flight: each rank then brings every name that
any rank used up to date (generation, arrival count, reduction versions),
because joined ranks sat out some uses, and names they never saw.
"""

import json
import struct

import smb

from . import fabric

_EPOCHS = 16  # after word 0 (joins ever) and word 1 (notifications)


def _order_at(size, epoch, place):
    return _EPOCHS + 8 * size + 8 * ((epoch % 2) * size + place)


def _buffer(state, group):
    size = group.size
    nbytes = _EPOCHS + 8 * size + 2 * 8 * size
    return state.open_or_create(fabric.buffer_name(group.namespace, "join"), nbytes,
                                stripe_unit=fabric._round_up(nbytes, 64))


def joined_indices(state, group):
    """Set indices of the ranks that joined in the current epoch (global set only)."""
    if group.set_id != 0:
        return set()
    buf = state.join_buffer(group)
    (total,) = struct.unpack("<q", buf.read(0, size=8))
    if total <= state.join_epoch * group.size:
        return set()
    epochs = struct.unpack(f"<{group.size}q", buf.read(_EPOCHS, size=8 * group.size))
    return {i for i, e in enumerate(epochs) if e == state.join_epoch + 1}


def join(state):
    group = state.process_sets[0]
    buf = state.join_buffer(group)
    epoch = state.join_epoch + 1
    size = group.size
    buf.write(_EPOCHS + 8 * group.index, struct.pack("<q", epoch))
    place = buf.fetch_add(0, 1) - (epoch - 1) * size
    buf.write(_order_at(size, epoch, place), struct.pack("<q", state.rank + 1))
    buf.apply("accumulate", "i64", 8, x=struct.pack("<q", 1))  # the notification: version +1
    # One server op per join: the epoch is complete at version epoch * size.
    while True:
        try:
            buf.wait_version(epoch * size, timeout=state.stalls.liveness)
            break
        except smb.Timeout:
            state.watch("join")
            epochs = struct.unpack(f"<{size}q", buf.read(_EPOCHS, size=8 * size))
            dead = [group.ranks[i] for i, e in enumerate(epochs) if e < epoch and not state.alive(group.ranks[i])]
            if dead:
                raise fabric.RankGone(f"join: rank(s) {dead} died before joining")
    (last,) = struct.unpack("<q", buf.read(_order_at(size, epoch, size - 1), size=8))
    state.barrier(f"join-{epoch}-quiet")
    _resync_names(state, group, epoch)
    state.join_epoch = epoch
    state.barrier(f"join-{epoch}-resynced")
    return int(last) - 1


def _resync_names(state, group, epoch):
    """Every name any rank used, brought up to date on this rank."""
    mine = json.dumps(sorted(group.collective_names())).encode()
    names_buf = state.client.create(fabric.buffer_name(group.namespace, f"join-names-{epoch}-{state.rank}"),
                                    len(mine) + 8, stripe_unit=fabric._round_up(len(mine) + 8, 64))
    names_buf.write(0, struct.pack("<Q", len(mine)) + mine)
    state.barrier(f"join-{epoch}-names")
    everyone = set()
    for rank in group.ranks:
        other = state.client.open(fabric.buffer_name(group.namespace, f"join-names-{epoch}-{rank}"))
        (length,) = struct.unpack("<Q", other.read(0, size=8))
        everyone.update(json.loads(bytes(other.read(8, size=length))))
        other.close()
    for name in sorted(everyone):
        group.collective(name).resync()
    names_buf.close()
