"""smb.collective: collectives through the fabric, framework neutral.

The engine under smb.torch and smb.tensorflow (Horovod's API), usable on
its own with NumPy arrays (numpy_ops). Its parts, one job each:

  basics        init() / shutdown(), ranks from the launcher, the job's namespace
  process_sets  ProcessSet, add_process_set, remove_process_set
  fabric        the arrival protocol: named collectives matched across ranks
  data          the data phase on bytes: server-side reductions, parts
  handles       asynchronous collectives: handles, poll, synchronize
  joining       join(): ranks out of data
  timeline      a Chrome-trace timeline of every collective's phases
  numpy_ops     allreduce, allgather, broadcast, ... on NumPy arrays

See docs/architecture.md ("Plugins") for the protocol.
"""
