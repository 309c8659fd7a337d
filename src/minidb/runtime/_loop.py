"""WheelEventLoop: asyncio's selector event loop with every timer on a hierarchical wheel.

Everything but timers is the stock ``asyncio.SelectorEventLoop``: I/O, signals, executors,
subprocesses, transports. Timers differ in three ways, none of them visible to a correct
asyncio program:

- ``call_at``/``call_later`` file the handle in a ``TimerWheel`` (O(1)) instead of a binary heap
  whose every comparison is a Python-level ``__lt__`` call; firing a million timers is several
  times cheaper.
- ``TimerHandle.cancel()`` unlinks the handle from its slot at once. Stock asyncio leaves a
  tombstone in the heap and rebuilds it when more than half of it is dead.
- ``loop.reschedule(handle, when)`` moves an armed timer in place, with no new handle and no
  cancel. An idle timeout pushed out on every request costs two attribute stores.

Semantics, tested in ``tests/runtime/test_loop.py``: a timer never fires before its ``when``
(deadlines round *up* to the next 1 ms tick; stock asyncio may fire up to one clock resolution
early); it fires at most one tick plus one loop turn late; timers run in deadline order, and
timers whose deadlines share a tick run in the order they were scheduled (FIFO, as on
uvloop/libuv, which also keep 1 ms deadlines; stock asyncio orders by the exact float and calls
the order of equal deadlines undefined); ``loop.time()`` is the stock monotonic clock
(``time.monotonic`` itself, without the stock method's Python frame).

A timer handle is an ``asyncio.TimerHandle`` (``WheelTimerHandle``) and prints as stock asyncio
prints one, ``<TimerHandle when=...>``, in every state and in every message that shows it (the
slow-callback warning, the exception handler's context); in debug mode it records the same
creation stack, frame for frame. Logs and tests written against stock asyncio match unchanged.

When the optional C accelerator is in use (``_accel.py``; ``MINIDB_PURE_PYTHON=1`` turns it
off) the wheel is its C twin and ``call_at``/``call_later`` leave making and filing the handle
to ``_cwheel.schedule`` (``reschedule`` to ``_cwheel.reschedule``); the Python methods remain
for debug mode and for the pure build. The I/O turn has its C twin too (``_cio``): the epoll
poll (``_poll_epoll``'s body) and the socket transport's ``_read_ready`` and ``write``.

``_run_once`` below is the stock one with the heap replaced by the wheel; it is "the only place
where callbacks are actually called", as in asyncio. The private ``_scheduled`` list is kept
(always empty) for code that peeks at it.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import os
import select
import selectors
import sys
import time
from asyncio import base_events, events, format_helpers, protocols, selector_events
from collections.abc import Callable
from typing import Any, TypeVarTuple, Unpack

from minidb.runtime import _accel
from minidb.runtime._accel import TimerWheel
from minidb.runtime._wheel import UNFILED, WheelStatistics

TICKS_PER_SECOND = 1000
"""Wheel resolution: 1 ms ticks, like Tokio. Deadlines round up to the next tick."""

INTROSPECTION_ENV = "MINIDB_INTROSPECTION"
"""Environment variable: ``1`` switches introspection on in every new loop; ``loop`` switches
on only its loop-wide figures and blocking detection (no per-task counters)."""

MAXIMUM_SELECT_TIMEOUT = 24 * 3600
"""Longest single wait in the selector, in seconds (the same cap as stock asyncio)."""

_EPOLL_SELECTOR = getattr(selectors, "EpollSelector", None)  # Linux only
_NOT_EPOLLIN = ~getattr(select, "EPOLLIN", 0)
_NOT_EPOLLOUT = ~getattr(select, "EPOLLOUT", 0)
_EVENT_READ = selectors.EVENT_READ
_EVENT_WRITE = selectors.EVENT_WRITE

_Ts = TypeVarTuple("_Ts")

_format_handle: Callable[[Any], str] = base_events._format_handle  # type: ignore[attr-defined]

_FAR_FUTURE_TICK = 1 << 62
"""Where ``call_at(inf)`` is filed: it comes round on the top level every 2**36 ticks, never due."""


def wait_reaching_tick(now: float, timeout: float, tick: int) -> float:
    """The shortest wait from ``now``, at least ``timeout``, after which the clock is in ``tick``.

    Waiting exactly ``tick / TICKS_PER_SECOND - now`` can fall a rounding error short of the
    tick, and a clock that moves by exactly the requested wait (the paused clock) would then
    spin short of it. Each step adds one unit in the last place of the *sum*: the sum is what
    has to move, and its ulp is the step that moves it. (Stepping ``timeout`` to its next float
    instead takes ``ulp(now) / ulp(timeout)`` steps, some 10**8 for a sub-millisecond wait on a
    clock a day past boot: seconds of spinning inside one turn.)
    """
    while math.floor((now + timeout) * TICKS_PER_SECOND) < tick:
        timeout += math.ulp(now + timeout)
    return timeout


class WheelTimerHandle(events.TimerHandle):
    """An ``asyncio.TimerHandle`` that knows its place in the wheel."""

    __slots__ = ("_wheel_tick", "_wheel_where")

    _loop: WheelEventLoop
    _wheel_tick: int
    _wheel_where: int

    # The wheel keys its slots by handle, so handles hash and compare by identity. (The stock
    # TimerHandle hashes by `when` and compares fields, which would make every slot lookup a
    # Python-level call and make distinct timers with equal deadlines collide.) Ordering
    # comparisons (`<` by `when`) are inherited unchanged.
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        loop: WheelEventLoop,
        context: contextvars.Context | None = None,
    ) -> None:
        # Handle.__init__ and TimerHandle.__init__ inlined: one frame instead of three on the
        # hottest allocation of a timer-heavy program. Fields and debug behaviour are the same.
        self._context = context if context is not None else contextvars.copy_context()
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        if loop._debug:
            # Stock takes the stack from TimerHandle.__init__'s frame and then drops that frame;
            # taking it from this one and dropping it keeps the same DEBUG_STACK_DEPTH window,
            # so once each caller drops its own frame too, the stack is the one stock keeps.
            self._source_traceback = format_helpers.extract_stack(sys._getframe())
            del self._source_traceback[-1]
        else:
            self._source_traceback = None  # type: ignore[assignment]
        self._when = when
        self._scheduled = False
        self._wheel_where = UNFILED

    def cancel(self) -> None:
        # TimerHandle.cancel -> loop._timer_handle_cancelled -> Handle.cancel, inlined: unlink
        # from the wheel at once, then forget the callback as Handle.cancel does.
        if not self._cancelled:
            if self._scheduled:
                self._loop._wheel.remove(self)
                self._scheduled = False
            self._cancelled = True
            if self._loop._debug:
                # Keep a representation for debug messages, as Handle.cancel does.
                self._repr = repr(self)  # type: ignore[assignment]
            self._callback = None  # type: ignore[assignment]
            self._args = None  # type: ignore[assignment]

    def _repr_info(self) -> list[str]:
        # Handle._repr_info opens with the class's own name, but this class is the loop's
        # TimerHandle and logs and tests match "<TimerHandle when=...>": name it as asyncio
        # names its own. Every printed form comes through here (repr and str, the repr cancel()
        # keeps in debug mode, in C too, the "Executing ... took" warning, the exception
        # handler's 'handle'). A subclass keeps its own name, as under asyncio.
        info: list[str] = super()._repr_info()  # type: ignore[misc]  # not in typeshed
        if self.__class__ is WheelTimerHandle:
            info[0] = events.TimerHandle.__name__
        return info

    # The Python cancel, kept when the accelerator replaces ``cancel`` (below) for the
    # instances of subclasses, which it hands back to this method.
    _cancel_py = cancel


_STOCK_RUN = frozenset(
    kind for kind in (events.Handle, events.TimerHandle, WheelTimerHandle)
    if kind._run is events.Handle._run
)
"""Handle types whose ``_run`` is the stock one, which the plain ``_run_once`` spells out."""


def _no_c_schedule(*args: Any) -> WheelTimerHandle:
    raise RuntimeError("the C accelerator is not in use")


_C_SCHEDULE: Callable[..., WheelTimerHandle] = (
    _accel.schedule
    if _accel.schedule is not None and _accel.check_handle_class(WheelTimerHandle)
    else _no_c_schedule
)
"""``_cwheel.schedule`` when the loop uses the C accelerator (see ``_accel.py``)."""



def _no_c_reschedule(*args: Any) -> bool:
    raise RuntimeError("the C accelerator is not in use")


_C_RESCHEDULE: Callable[..., bool] = (
    _accel.reschedule
    if _accel.reschedule is not None and _C_SCHEDULE is not _no_c_schedule
    else _no_c_reschedule
)
"""``_cwheel.reschedule`` under the same condition."""

if _C_SCHEDULE is not _no_c_schedule and _accel.cancel_method is not None:
    # cancel() in C: no frame between the caller and the unlink from the wheel.
    WheelTimerHandle.cancel = _accel.cancel_method(WheelTimerHandle)  # type: ignore[method-assign]


class _SocketTransport(selector_events._SelectorSocketTransport):  # type: ignore[name-defined,misc]
    """asyncio's socket transport, its read of a plain ``Protocol`` one Python frame shorter:
    ``_read_ready`` (the loop's reader callback, one call per read) runs the stock
    ``_read_ready__data_received`` itself instead of calling it through ``_read_ready_cb``
    (the same source in 3.11-3.13). A ``BufferedProtocol`` (``set_protocol`` says which)
    reads the stock way. With the accelerator (``_cio``), ``_read_ready`` and ``write`` are
    C twins of this ``_read_ready`` and of the stock ``write``."""

    # The fields the loop's I/O turn reads once per read or write, as slots (the base class's
    # __init__ assigns them as usual): a slot is read at its offset, where an attribute in the
    # instance's __dict__ costs the C twins (and the Python ones' unspecialised reads) a type
    # lookup and a dict lookup each. ``max_size`` is the stock class attribute, copied.
    __slots__ = (
        "_buffer", "_conn_lost", "_empty_waiter", "_eof", "_plain", "_protocol", "_sock",
        "_sock_fd", "max_size",
    )

    _plain: bool
    """The protocol is not a ``BufferedProtocol``: ``data_received`` gets the bytes (set by
    ``set_protocol``, which the base class's ``__init__`` calls)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.max_size = selector_events._SelectorTransport.max_size  # type: ignore[attr-defined]
        super().__init__(*args, **kwargs)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._plain = not isinstance(protocol, protocols.BufferedProtocol)
        super().set_protocol(protocol)

    def _read_ready(self) -> None:
        if not self._plain:
            self._read_ready_cb()
            return
        # _SelectorSocketTransport._read_ready__data_received, spelled out.
        if self._conn_lost:
            return
        try:
            data = self._sock.recv(self.max_size)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_ready__on_eof()
            return
        try:
            self._protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    # The Python twins, kept when the accelerator replaces both (below): the reference, and
    # what the C methods hand the cases they do not take themselves.
    _read_ready_py = _read_ready
    _write_py = selector_events._SelectorSocketTransport.write  # type: ignore[attr-defined]
    _get_write_buffer_size_py = (
        selector_events._SelectorSocketTransport.get_write_buffer_size  # type: ignore[attr-defined]
    )


if _accel.io_methods is not None:
    # The C read (into one reused buffer), write (sent at once when nothing is buffered) and
    # buffer size (0 at once when nothing is).
    _read_ready_c, _write_c, _get_write_buffer_size_c = _accel.io_methods(
        _SocketTransport, _SocketTransport._read_ready_py, _SocketTransport._write_py,
        _SocketTransport._get_write_buffer_size_py,
    )
    _SocketTransport._read_ready = _read_ready_c  # type: ignore[method-assign]
    _SocketTransport.write = _write_c
    _SocketTransport.get_write_buffer_size = _get_write_buffer_size_c

_C_POLL: Callable[..., None] | None = _accel.poll
"""``_cio.poll``, the C body of ``_poll_epoll``, when the loop uses the accelerator."""
_C_RUN_READY: Callable[..., int] | None = _accel.run_ready
"""``_cio.run_ready``, the C loop over the ready stock handles of ``_run_once``."""
_STOCK_RUN_TYPES = tuple(_STOCK_RUN)


class WheelEventLoop(asyncio.SelectorEventLoop):
    """A drop-in asyncio event loop whose timers run on a hierarchical timer wheel."""

    # Private state and helpers of BaseEventLoop that typeshed does not declare.
    _debug: bool
    _ready: Any
    _stopping: bool
    _selector: Any
    _current_handle: events.Handle | None
    _check_closed: Callable[[], None]
    _check_thread: Callable[[], None]
    _check_callback: Callable[[object, str], None]
    _process_events: Callable[[Any], None]
    _remove_reader: Callable[[Any], bool]
    _remove_writer: Callable[[Any], bool]
    slow_callback_duration: float

    _introspector: Any = None
    """The ``Introspector`` while introspection is on (``_introspection.py``), else None."""

    _tick_tolerance = 0.0
    """Float noise, in ticks, forgiven when a deadline is turned into a tick. None on the real
    clock (a deadline a hair past a tick boundary waits for the next tick: never early); the
    paused clock forgives a nanosecond so that 0.1 + 0.2 seconds lands on tick 300."""

    time = staticmethod(time.monotonic)
    """The stock loop's clock (``BaseEventLoop.time`` returns ``time.monotonic()``), as the C
    function itself: the loop asks it every turn and a server per request, where the stock
    method is a Python frame around it. A subclass's ``time`` (the paused clock's) wins."""

    def __init__(self, selector: Any = None) -> None:
        super().__init__(selector)
        self._wheel: TimerWheel[WheelTimerHandle] = TimerWheel(
            max(0, math.floor(self.time() * TICKS_PER_SECOND))
        )
        introspection = os.environ.get(INTROSPECTION_ENV, "0")
        if introspection not in ("", "0"):
            # Imported here: the module instruments this class, and costs nothing when off.
            from minidb.runtime._introspection import enable_introspection

            enable_introspection(self, per_task=introspection != "loop")

    def _make_socket_transport(
        self, sock: Any, protocol: asyncio.BaseProtocol, waiter: Any = None, *,
        extra: Any = None, server: Any = None,
    ) -> _SocketTransport:
        """The stock method's transport, as ``_SocketTransport`` (a shorter read)."""
        if sys.version_info >= (3, 12):
            self._ensure_fd_no_transport(sock)  # type: ignore[attr-defined]
        return _SocketTransport(self, sock, protocol, waiter, extra, server)

    # -- scheduling ----------------------------------------------------------------------

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> WheelTimerHandle:
        """Like ``asyncio.AbstractEventLoop.call_at``; the handle is filed on the wheel."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer = WheelTimerHandle(when, callback, args, self, context)
        if timer._source_traceback:
            del timer._source_traceback[-1]
        try:
            tick = math.ceil(when * TICKS_PER_SECOND - self._tick_tolerance)
        except (OverflowError, ValueError):
            tick = self._tick_for(when)
        self._wheel.insert(timer, tick)
        timer._scheduled = True
        return timer

    def call_later(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> WheelTimerHandle:
        """Like ``asyncio.AbstractEventLoop.call_later``: ``call_at(time() + delay)``, as stock."""
        if delay is None:
            raise TypeError("delay must not be None")
        timer = self.call_at(self.time() + delay, callback, *args, context=context)
        if timer._source_traceback:
            del timer._source_traceback[-1]
        return timer

    # The same two methods with the handle made and filed in C (``_cwheel.schedule``), used when
    # the accelerator is on: no bytecode runs between the loop's checks and the filed handle.
    # In debug mode (the traceback, the thread and callback checks) they do the Python methods'
    # work in their own frame rather than calling them: a frame more between the caller and the
    # handle would cost the traceback its oldest frame, which stock asyncio keeps.

    def _call_at_c(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> WheelTimerHandle:
        """Like ``asyncio.AbstractEventLoop.call_at``; the handle is filed on the wheel."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
            timer = WheelTimerHandle(when, callback, args, self, context)
            if timer._source_traceback:
                del timer._source_traceback[-1]
            self._wheel.insert(timer, self._tick_for(when))
            timer._scheduled = True
            return timer
        return _C_SCHEDULE(
            self, self._wheel, WheelTimerHandle, when, callback, args, context,
            self._tick_tolerance,
        )

    def _call_later_c(
        self,
        delay: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> WheelTimerHandle:
        """Like ``asyncio.AbstractEventLoop.call_later`` (which is ``call_at(time() + delay)``)."""
        if delay is None:
            raise TypeError("delay must not be None")
        if self._debug:
            timer = self.call_at(self.time() + delay, callback, *args, context=context)
            if timer._source_traceback:
                del timer._source_traceback[-1]
            return timer
        when = self.time() + delay
        self._check_closed()
        return _C_SCHEDULE(
            self, self._wheel, WheelTimerHandle, when, callback, args, context,
            self._tick_tolerance,
        )

    _call_at_py = call_at
    _call_later_py = call_later
    if _C_SCHEDULE is not _no_c_schedule:
        call_at = _call_at_c
        call_later = _call_later_c

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The accelerated call_later files the timer itself (no bytecode on the hottest path). A
        # subclass that hooks call_at (CPython's virtual-time TestLoop does) must still see
        # every timer, so it gets the plain delegation.
        if (
            cls.call_at is not WheelEventLoop.call_at
            and cls.call_later is WheelEventLoop.call_later
        ):
            cls.call_later = WheelEventLoop._call_later_py  # type: ignore[method-assign]

    def reschedule(self, handle: Any, when: float) -> bool:
        """Move an armed timer of this loop to ``when``, in place; return whether it was armed.

        No new handle is made and nothing is cancelled: the same handle fires at the new time.
        Returns False, changing nothing, when the handle has already fired or been cancelled;
        the caller then arms a new one with ``call_at``.
        """
        try:
            scheduled = handle._scheduled
        except AttributeError:
            raise TypeError(f"{handle!r} is not a timer handle") from None
        if not scheduled:
            return False
        if handle._loop is not self:
            raise ValueError(f"{handle!r} is not a timer of this loop")
        try:
            tick = math.ceil(when * TICKS_PER_SECOND - self._tick_tolerance)
        except (OverflowError, ValueError):
            tick = self._tick_for(when)
        except TypeError:
            raise TypeError(f"when must be a number, not {type(when).__name__}") from None
        handle._when = when
        self._wheel.reset(handle, tick)
        return True

    if _C_RESCHEDULE is not _no_c_reschedule:
        _reschedule_py = reschedule

        def reschedule(self, handle: Any, when: float) -> bool:
            """Move an armed timer of this loop to ``when``, in place; return whether it was armed.

            The accelerated twin of the method above (same checks and errors, in C).
            """
            return _C_RESCHEDULE(self, self._wheel, handle, when, self._tick_tolerance)

    def _timer_handle_cancelled(self, handle: Any) -> None:
        # Called by TimerHandle.cancel(): unlink at once, leaving no tombstone behind.
        if handle._scheduled:
            self._wheel.remove(handle)
            handle._scheduled = False

    def _tick_for(self, when: float) -> int:
        """The first tick at or after ``when`` (seconds on this loop's clock)."""
        try:
            return math.ceil(when * TICKS_PER_SECOND - self._tick_tolerance)
        except OverflowError:  # +/- infinity
            return _FAR_FUTURE_TICK if when > 0 else 0
        except ValueError:  # NaN compares false with everything; stock fires it at once
            return 0

    def _now_tick(self) -> int:
        """The last tick that has fully begun on this loop's clock."""
        return math.floor(self.time() * TICKS_PER_SECOND)

    # -- introspection -------------------------------------------------------------------

    def timer_statistics(self) -> WheelStatistics:
        """Where this loop's timers are: entries per wheel level, pending, next expiration."""
        return self._wheel.statistics()

    # -- the loop ------------------------------------------------------------------------

    def close(self) -> None:
        if self._introspector is not None:
            self._introspector.uninstall()
        super().close()
        for handle in self._wheel.clear():
            handle._scheduled = False

    def _select_timeout(self) -> float | None:
        """How long the selector may block: 0 with work ready, else until the wheel's next slot."""
        if self._ready or self._stopping:
            return 0
        at = self._wheel.poll_at()
        if at is None:
            return None
        now = self.time()
        timeout = at / TICKS_PER_SECOND - now
        if timeout > MAXIMUM_SELECT_TIMEOUT:
            return MAXIMUM_SELECT_TIMEOUT
        if timeout <= 0:
            return 0
        return wait_reaching_tick(now, timeout, at)

    def _poll_epoll(self, selector: Any, timeout: float | None) -> None:
        """``selector.select(timeout)`` and ``_process_events`` of what it returns, as one
        function: the same handles appended to the ready queue in the same order, and the
        same cancelled readers and writers removed, without the list of (key, mask) pairs,
        a method call per descriptor to look its key up and one per handle to append it (a
        server at ``redis-benchmark -P 1`` has one ready socket per request). It reads the
        selector's private ``_selector`` (the epoll object) and ``_fd_to_key``, the same in
        3.11-3.13; ``_run_once`` takes it only for an ``EpollSelector`` itself and a loop
        whose ``_process_events`` is the class's (tests replace both). With the accelerator,
        ``_run_once`` calls its C twin (``_cio.poll``) instead, which also calls epoll_wait
        itself, into an array, without the list of (fd, events) tuples."""
        # EpollSelector.select's timeout: epoll_wait has a resolution of 1 ms, rounded away
        # from zero so as to wait at least ``timeout``.
        if timeout is None:
            timeout = -1
        elif timeout <= 0:
            timeout = 0
        else:
            timeout = math.ceil(timeout * 1e3) * 1e-3
        fd_to_key = selector._fd_to_key
        try:
            fd_events = selector._selector.poll(timeout, len(fd_to_key) or 1)
        except InterruptedError:
            return
        append = self._ready.append
        for fd, event in fd_events:
            key = fd_to_key.get(fd)
            if key is None:
                continue
            wanted = key.events
            reader, writer = key.data
            if event & _NOT_EPOLLOUT and wanted & _EVENT_READ and reader is not None:
                if reader._cancelled:
                    self._remove_reader(key.fileobj)
                else:
                    append(reader)
            if event & _NOT_EPOLLIN and wanted & _EVENT_WRITE and writer is not None:
                if writer._cancelled:
                    self._remove_writer(key.fileobj)
                else:
                    append(writer)

    def _run_once(self) -> None:
        """Run one full iteration: poll I/O, move due timers to the ready queue, run it."""
        selector = self._selector
        if type(selector) is _EPOLL_SELECTOR and "_process_events" not in self.__dict__:
            if _C_POLL is not None:
                _C_POLL(self, selector._selector.fileno(), self._select_timeout(),
                        selector._fd_to_key, self._ready.append)
            else:
                self._poll_epoll(selector, self._select_timeout())
        else:
            event_list = selector.select(self._select_timeout())
            self._process_events(event_list)
            # Needed to break cycles when an exception occurs.
            event_list = None

        ready = self._ready
        due = self._wheel.poll(self._now_tick())
        if due:
            # In deadline (tick) order, FIFO among timers sharing a tick.
            for timer in due:
                timer._scheduled = False
            ready.extend(due)

        # This is the only place where callbacks are actually *called*. Callbacks scheduled by
        # the callbacks run now wait for the next turn (after another I/O poll).
        ntodo = len(ready)
        if _C_RUN_READY is not None and ntodo and not self._debug:
            # The loop below for the stock handles, in C (it stops at any other; debug mode,
            # read once per turn here, keeps the Python loop's timing of each callback).
            ntodo -= _C_RUN_READY(ready, ntodo, _STOCK_RUN_TYPES, self._callback_failed)
        for _ in range(ntodo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            if self._debug:
                try:
                    self._current_handle = handle
                    t0 = self.time()
                    handle._run()
                    dt = self.time() - t0
                    if dt >= self.slow_callback_duration:
                        # Looked up at call time, like the stock loop, so patching
                        # asyncio.base_events.logger (as tests do) takes effect.
                        base_events.logger.warning(  # type: ignore[attr-defined]
                            "Executing %s took %.3f seconds", _format_handle(handle), dt
                        )
                finally:
                    self._current_handle = None
            elif type(handle) in _STOCK_RUN:
                # Handle._run, spelled out: a Python frame less per callback (one per ready
                # socket). The instrumented _run_once of introspection keeps the frame (its
                # blocking detector looks for it).
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    self._callback_failed(handle, exc)
            else:
                handle._run()
        handle = None  # Needed to break cycles when an exception occurs.

    def _callback_failed(self, handle: events.Handle, exc: BaseException) -> None:
        """What ``Handle._run`` does when its callback raised: the same context to the
        exception handler (the callback formatted as that Python version formats it)."""
        callback, args = handle._callback, handle._args  # type: ignore[attr-defined]
        if sys.version_info >= (3, 13):
            source = format_helpers._format_callback_source(
                callback, args, debug=self.get_debug()
            )
        else:
            source = format_helpers._format_callback_source(
                callback, args
            )
        context = {"message": f"Exception in callback {source}", "exception": exc,
                   "handle": handle}
        if handle._source_traceback:  # type: ignore[attr-defined]
            context["source_traceback"] = handle._source_traceback  # type: ignore[attr-defined]
        self.call_exception_handler(context)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An event loop policy whose new loops are ``WheelEventLoop``s.

    ``asyncio.set_event_loop_policy(minidb.runtime.EventLoopPolicy())`` switches a whole program.
    """

    _loop_factory = WheelEventLoop

    def new_event_loop(self) -> WheelEventLoop:
        return WheelEventLoop()


def new_event_loop() -> WheelEventLoop:
    """A new ``WheelEventLoop``: the ``loop_factory`` for ``asyncio.run`` and ``asyncio.Runner``."""
    return WheelEventLoop()
