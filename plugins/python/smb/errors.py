"""The exceptions of the smb package.

Every failure in libsmb arrives as an instance of :class:`Error` (or of the
subclass for its code), with the C++ message unchanged: it names the
server, the buffer and the operation. ``err.code`` is the code's name
(``"server_gone"``, ``"timeout"``, ...), as ``smb::Errc`` spells it.
"""


class Error(Exception):
    """A failure reported by libsmb; ``code`` is the smb::Errc name."""

    code = "internal"

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(Error, ValueError):
    code = "invalid_argument"


class OutOfRange(Error, IndexError):
    code = "out_of_range"


class NotFound(Error, LookupError):
    code = "not_found"


class AlreadyExists(Error):
    code = "already_exists"


class CapacityExhausted(Error, MemoryError):
    """A server has not enough free memory, or a per-client limit was reached."""

    code = "no_space"


class Unreachable(Error, ConnectionError):
    code = "unreachable"


class ServerGone(Error, ConnectionError):
    """A memory server that was connected went away."""

    code = "server_gone"


class Timeout(Error, TimeoutError):
    code = "timeout"


class ProtocolError(Error):
    code = "protocol"


class TransportError(Error):
    code = "transport"


class InternalError(Error):
    code = "internal"


class DataLost(Error):
    """A memory server restarted empty: its stripes of the buffer are gone."""

    code = "data_lost"


class PermissionDenied(Error, PermissionError):
    """The servers want a shared secret (SMB_AUTH_TOKEN_FILE) this client lacks or got wrong."""

    code = "permission_denied"


class Busy(Error):
    """Being repaired by another client, or a client holding it did not pause for a repair."""

    code = "busy"


class OutOfOrder(Error):
    """A replica's copy of an op could not take its place in the copy's order
    (libsmb handles it: the copy is marked stale)."""

    code = "out_of_order"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, OutOfRange, NotFound, AlreadyExists, CapacityExhausted,
                                       Unreachable, ServerGone, Timeout, ProtocolError, TransportError,
                                       InternalError, DataLost, PermissionDenied, Busy, OutOfOrder)}


def from_code(code, message):
    """The exception for an smb::Errc name (used by the C++ translator)."""
    return _BY_CODE.get(code, Error)(message, code)
