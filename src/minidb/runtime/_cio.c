/*
 * minidb.runtime._cio: the loop's I/O turn in C, beside its Python twins in _loop.py.
 *
 * - poll(loop, epfd, timeout, fd_to_key, append): WheelEventLoop._poll_epoll's body: one
 *   epoll_wait (the GIL released) and, per ready descriptor, its reader and writer handles
 *   appended to the ready queue, or a cancelled one's registration removed, as the Python
 *   method does, without the list of (fd, events) tuples and a dozen bytecodes per descriptor.
 * - io_methods(cls, python_read_ready, stock_write): _read_ready and write methods for
 *   _SocketTransport. _read_ready reads into one reused buffer (no 256 KiB allocation and
 *   shrink per read, no argument parsing of socket.recv) and calls data_received; write sends
 *   a bytes object at once when nothing is buffered. Everything else (a BufferedProtocol, a
 *   socket that is not a socket.socket, a partial send, a closing transport, any other
 *   argument) goes to the Python method, which stays the reference.
 *
 * A server at redis-benchmark -P 1 runs each of these once per request (issue 18).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../_cexceptions.h"
#include "../_cslots.h"

#include <errno.h>
#include <math.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/epoll.h>
#endif

/* selectors.EVENT_READ and EVENT_WRITE (checked against the module at import, in _accel). */
#define EVENT_READ 1
#define EVENT_WRITE 2

/* What one read takes at most: asyncio's max_size (256 KiB). The buffer is used with the GIL
   held, between recv and the bytes object made from it, so one is enough. */
#define READ_BUFFER_SIZE (256 * 1024)
static char read_buffer[READ_BUFFER_SIZE];

/* The transport's slots the methods read, by offset in its instances (resolved once: the
   class declares them as __slots__, so each read is a load, not a type and a dict lookup). */
enum {
    T_PLAIN, T_CONN_LOST, T_SOCK, T_SOCK_FD, T_MAX_SIZE, T_PROTOCOL, T_EOF, T_EMPTY_WAITER,
    T_BUFFER, T_FIELDS
};
static const char *const transport_fields[T_FIELDS] = {
    "_plain", "_conn_lost", "_sock", "_sock_fd", "max_size", "_protocol", "_eof",
    "_empty_waiter", "_buffer",
};
static Py_ssize_t transport_offsets[T_FIELDS];
static PyTypeObject *transport_type;  /* the class whose offsets these are */
#define FIELD(self, i) (*(PyObject **)((char *)(self) + transport_offsets[i]))

/* asyncio.Handle's slots the poll and run_ready read at their offsets (resolved at import;
   ``handle_fields_found`` false: a Python whose Handle differs, and run_ready refuses). */
enum { H_CANCELLED, H_CALLBACK, H_ARGS, H_CONTEXT, H_FIELDS };
static const char *const handle_fields[H_FIELDS] = {"_cancelled", "_callback", "_args", "_context"};
static Py_ssize_t handle_offsets[H_FIELDS];
static int handle_fields_found;
static PyTypeObject *handle_type;
#define HANDLE_FIELD(handle, i) (*(PyObject **)((char *)(handle) + handle_offsets[i]))

static PyObject *str_data_received, *str_fatal_error, *str_read_ready_cb, *str_on_eof;
static PyObject *str_cancelled, *str_remove_reader, *str_remove_writer, *str_popleft,
    *str_appendleft;
static PyObject *socket_type;        /* socket.socket */
static PyObject *python_read_ready;  /* _SocketTransport's Python _read_ready */
static PyObject *stock_write;        /* selector_events._SelectorSocketTransport.write */
static PyObject *stock_buffer_size;  /* and its get_write_buffer_size */

static const char READ_ERROR[] = "Fatal read error on socket transport";
static const char WRITE_ERROR[] = "Fatal write error on socket transport";
static const char PROTOCOL_ERROR[] = "Fatal error: protocol.data_received() call failed.";

/* ------------------------------------------------------------------------------------ */

/* Whether every slot the methods read is set (else the Python method raises for it). */
static int
fields_set(PyObject *self)
{
    for (int i = 0; i < T_FIELDS; i++) {
        if (FIELD(self, i) == NULL) {
            return 0;
        }
    }
    return 1;
}

/* The truth of the slot i; -1 on error. */
static int
field_true(PyObject *self, int i)
{
    PyObject *value = FIELD(self, i);
    if (value == Py_True || value == Py_False || value == Py_None) {
        return value == Py_True;
    }
    return PyObject_IsTrue(value);
}

/* self._sock_fd when self._sock is a socket.socket: the descriptor, -2 when it is something
   else (the Python method handles it), -1 on error. */
static long
socket_fd(PyObject *self)
{
    if ((PyObject *)Py_TYPE(FIELD(self, T_SOCK)) != socket_type) {
        return -2;
    }
    long fd = PyLong_AsLong(FIELD(self, T_SOCK_FD));
    if (fd == -1 && PyErr_Occurred()) {
        return -1;
    }
    return fd < 0 ? -2 : fd;
}

/* The error set now, as the Python methods' `except BaseException as exc:` sees it: SystemExit
   and KeyboardInterrupt stay raised (-1); anything else is handed to
   self._fatal_error(exc, message) while it is the exception being handled, as there. */
static int
to_fatal_error(PyObject *self, const char *message)
{
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        return -1;
    }
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    PyObject *exc = value;
#endif
    PyObject *handled = PyErr_GetHandledException();
    PyErr_SetHandledException(exc);
    PyObject *text = PyUnicode_FromString(message);
    PyObject *result = text == NULL ? NULL
        : PyObject_CallMethodObjArgs(self, str_fatal_error, exc, text, NULL);
    Py_XDECREF(text);
    PyErr_SetHandledException(handled);
    Py_XDECREF(handled);
    Py_DECREF(exc);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* OSError from errno, handed to self._fatal_error as the Python method would. */
static PyObject *
os_error_to_fatal(PyObject *self, const char *message)
{
    PyErr_SetFromErrno(PyExc_OSError);
    if (to_fatal_error(self, message) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _SocketTransport._read_ready (see its Python twin). */
static PyObject *
transport_read_ready(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!PyObject_TypeCheck(self, transport_type) || !fields_set(self)) {
        return PyObject_CallOneArg(python_read_ready, self);
    }
    int plain = field_true(self, T_PLAIN);
    if (plain <= 0) {
        return plain < 0 ? NULL : PyObject_CallMethodNoArgs(self, str_read_ready_cb);
    }
    int lost = field_true(self, T_CONN_LOST);
    if (lost != 0) {
        if (lost < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    long fd = socket_fd(self);
    if (fd < 0) {
        return fd == -1 ? NULL : PyObject_CallOneArg(python_read_ready, self);
    }
    Py_ssize_t max_size = PyLong_AsSsize_t(FIELD(self, T_MAX_SIZE));
    if (max_size == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (max_size <= 0) {
        return PyObject_CallOneArg(python_read_ready, self);  /* recv(0): the Python way */
    }
    if (max_size > READ_BUFFER_SIZE) {
        max_size = READ_BUFFER_SIZE;
    }
    ssize_t n;
    for (;;) {
        /* MSG_DONTWAIT: never blocks the loop, whatever the socket's own mode. */
        n = recv((int)fd, read_buffer, (size_t)max_size, MSG_DONTWAIT);
        if (n >= 0 || errno != EINTR) {
            break;
        }
        /* As socket.recv does (PEP 475): run the signal handlers, then try again. */
        if (PyErr_CheckSignals() < 0) {
            if (to_fatal_error(self, READ_ERROR) < 0) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
    }
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            Py_RETURN_NONE;
        }
        return os_error_to_fatal(self, READ_ERROR);
    }
    if (n == 0) {
        return PyObject_CallMethodNoArgs(self, str_on_eof);
    }
    PyObject *data = PyBytes_FromStringAndSize(read_buffer, n);
    if (data == NULL) {
        return NULL;
    }
    PyObject *protocol = Py_NewRef(FIELD(self, T_PROTOCOL));  /* data_received may replace it */
    PyObject *result = PyObject_CallMethodOneArg(protocol, str_data_received, data);
    Py_DECREF(protocol);
    Py_DECREF(data);
    if (result == NULL) {
        if (to_fatal_error(self, PROTOCOL_ERROR) < 0) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Py_DECREF(result);
    Py_RETURN_NONE;
}

/* _SocketTransport.write: bytes sent at once when nothing is buffered and the transport is
   open; the stock method for everything else, and for what a partial send leaves. */
static PyObject *
transport_write(PyObject *self, PyObject *data)
{
    if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) == 0
        || !PyObject_TypeCheck(self, transport_type) || !fields_set(self)
        || FIELD(self, T_EMPTY_WAITER) != Py_None) {
        goto stock;
    }
    int flags[3] = {T_EOF, T_CONN_LOST, T_BUFFER};
    for (int k = 0; k < 3; k++) {
        int flag = field_true(self, flags[k]);
        if (flag != 0) {
            if (flag < 0) {
                return NULL;
            }
            goto stock;  /* which raises after write_eof, counts after a loss, buffers */
        }
    }
    long fd = socket_fd(self);
    if (fd < 0) {
        if (fd == -1) {
            return NULL;
        }
        goto stock;
    }
    const char *bytes = PyBytes_AS_STRING(data);
    Py_ssize_t size = PyBytes_GET_SIZE(data);
    ssize_t n = send((int)fd, bytes, (size_t)size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == size) {
        Py_RETURN_NONE;
    }
    if (n < 0) {
        if (errno == EINTR) {
            goto stock;  /* which runs the signal handlers and sends again */
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return os_error_to_fatal(self, WRITE_ERROR);
        }
        n = 0;
    }
    /* Not all of it went: the stock method buffers the rest and waits for the socket. */
    PyObject *rest = PyBytes_FromStringAndSize(bytes + n, size - n);
    if (rest == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(stock_write, self, rest, NULL);
    Py_DECREF(rest);
    return result;
stock:
    return PyObject_CallFunctionObjArgs(stock_write, self, data, NULL);
}

/* _SocketTransport.get_write_buffer_size: 0 when nothing is buffered, the stock method
   otherwise. The stock method's buffer is a bytearray (3.11) or a deque of views (3.12 on),
   and either way an empty one means 0; the express lane asks once per read it runs. */
static PyObject *
transport_write_buffer_size(PyObject *self, PyObject *unused)
{
    if (PyObject_TypeCheck(self, transport_type) && FIELD(self, T_BUFFER) != NULL) {
        int held = PyObject_IsTrue(FIELD(self, T_BUFFER));
        if (held < 0) {
            return NULL;
        }
        if (!held) {
            return PyLong_FromLong(0);
        }
    }
    return PyObject_CallOneArg(stock_buffer_size, self);
}

static PyMethodDef read_ready_def = {
    "_read_ready", (PyCFunction)transport_read_ready, METH_NOARGS,
    "The reader callback: recv into a reused buffer, then protocol.data_received (C)."
};

static PyMethodDef write_def = {
    "write", (PyCFunction)transport_write, METH_O,
    "Send bytes at once when nothing is buffered, else as the stock write does (C)."
};

static PyMethodDef write_buffer_size_def = {
    "get_write_buffer_size", (PyCFunction)transport_write_buffer_size, METH_NOARGS,
    "0 when nothing is buffered, else as the stock method counts (C)."
};

static PyObject *
cio_io_methods(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "io_methods(cls, python_read_ready, stock_write, "
                        "stock_get_write_buffer_size)");
        return NULL;
    }
    if (transport_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "io_methods() serves one transport class");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    int found = member_offsets(cls, transport_fields, T_FIELDS, transport_offsets);
    if (found < 0) {
        return NULL;
    }
    if (found < T_FIELDS) {
        PyErr_Format(PyExc_TypeError, "%R has no plain slot %s", cls, transport_fields[found]);
        return NULL;
    }
    PyObject *read_ready = PyDescr_NewMethod(cls, &read_ready_def);
    PyObject *write = PyDescr_NewMethod(cls, &write_def);
    PyObject *buffer_size = PyDescr_NewMethod(cls, &write_buffer_size_def);
    if (read_ready == NULL || write == NULL || buffer_size == NULL) {
        Py_XDECREF(read_ready);
        Py_XDECREF(write);
        Py_XDECREF(buffer_size);
        return NULL;
    }
    transport_type = (PyTypeObject *)Py_NewRef(cls);
    python_read_ready = Py_NewRef(args[1]);
    stock_write = Py_NewRef(args[2]);
    stock_buffer_size = Py_NewRef(args[3]);
    return Py_BuildValue("(NNN)", read_ready, write, buffer_size);
}

/* ------------------------------------------------------------------------------------ */

#ifdef __linux__
/* handle appended to the ready queue, or, cancelled, its registration removed. */
static int
ready_or_removed(PyObject *loop, PyObject *append, PyObject *handle, PyObject *remove,
                 PyObject *fileobj)
{
    int cancelled;
    PyObject *flag;
    if (handle_fields_found && PyObject_TypeCheck(handle, handle_type)
        && (flag = HANDLE_FIELD(handle, H_CANCELLED)) != NULL) {
        cancelled = flag == Py_True ? 1 : flag == Py_False ? 0 : PyObject_IsTrue(flag);
    }
    else {
        PyObject *value = PyObject_GetAttr(handle, str_cancelled);
        cancelled = value == NULL ? -1 : PyObject_IsTrue(value);
        Py_XDECREF(value);
    }
    if (cancelled < 0) {
        return -1;
    }
    PyObject *result = cancelled ? PyObject_CallMethodOneArg(loop, remove, fileobj)
                                 : PyObject_CallOneArg(append, handle);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

#define STACK_EVENTS 64

static PyObject *
cio_poll(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "poll(loop, epfd, timeout, fd_to_key, append)");
        return NULL;
    }
    PyObject *loop = args[0], *timeout_obj = args[2], *fd_to_key = args[3], *append = args[4];
    long epfd = PyLong_AsLong(args[1]);
    if (epfd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (epfd < 0 || epfd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "poll: epfd out of range");
        return NULL;
    }
    if (!PyDict_Check(fd_to_key)) {
        PyErr_SetString(PyExc_TypeError, "fd_to_key must be a dict");
        return NULL;
    }
    /* EpollSelector.select's timeout: None waits; else milliseconds, rounded up. */
    int timeout_ms = -1;
    if (timeout_obj != Py_None) {
        double timeout = PyFloat_AsDouble(timeout_obj);
        if (timeout == -1.0 && PyErr_Occurred()) {
            return NULL;
        }
        if (!(timeout > 0)) {
            timeout_ms = 0;
        }
        else {
            double ms = ceil(timeout * 1e3);
            timeout_ms = ms >= (double)INT_MAX ? INT_MAX : (int)ms;
        }
    }
    Py_ssize_t registered = PyDict_GET_SIZE(fd_to_key);
    int max_events = registered < 1 ? 1 : registered > INT_MAX / 2 ? INT_MAX / 2 : (int)registered;
    struct epoll_event stack_events[STACK_EVENTS];
    struct epoll_event *events = stack_events;
    if (max_events > STACK_EVENTS) {
        events = PyMem_Malloc(sizeof(struct epoll_event) * (size_t)max_events);
        if (events == NULL) {
            return PyErr_NoMemory();
        }
    }
    int n;
    Py_BEGIN_ALLOW_THREADS
    n = epoll_wait((int)epfd, events, max_events, timeout_ms);
    Py_END_ALLOW_THREADS
    if (n < 0) {
        int saved = errno;
        if (events != stack_events) {
            PyMem_Free(events);
        }
        if (saved == EINTR) {
            /* The signal handlers run now; the loop polls again on its next turn. */
            if (PyErr_CheckSignals() < 0) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        errno = saved;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    for (int i = 0; i < n; i++) {
        PyObject *fd = PyLong_FromLong(events[i].data.fd);
        if (fd == NULL) {
            goto error;
        }
        PyObject *key = PyDict_GetItemWithError(fd_to_key, fd);
        Py_DECREF(fd);
        if (key == NULL) {
            if (PyErr_Occurred()) {
                goto error;
            }
            continue;
        }
        /* A SelectorKey (fileobj, fd, events, data) whose data is (reader, writer). */
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 4
            || !PyTuple_Check(PyTuple_GET_ITEM(key, 3)) || PyTuple_GET_SIZE(PyTuple_GET_ITEM(key, 3)) != 2) {
            PyErr_SetString(PyExc_TypeError, "poll: a selector key is not (fileobj, fd, events, (reader, writer))");
            goto error;
        }
        Py_INCREF(key);  /* removing a cancelled reader drops the dict's reference */
        long wanted = PyLong_AsLong(PyTuple_GET_ITEM(key, 2));
        if (wanted == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto error;
        }
        PyObject *fileobj = PyTuple_GET_ITEM(key, 0);
        PyObject *reader = PyTuple_GET_ITEM(PyTuple_GET_ITEM(key, 3), 0);
        PyObject *writer = PyTuple_GET_ITEM(PyTuple_GET_ITEM(key, 3), 1);
        uint32_t happened = events[i].events;
        if ((happened & ~(uint32_t)EPOLLOUT) && (wanted & EVENT_READ) && reader != Py_None
            && ready_or_removed(loop, append, reader, str_remove_reader, fileobj) < 0) {
            Py_DECREF(key);
            goto error;
        }
        if ((happened & ~(uint32_t)EPOLLIN) && (wanted & EVENT_WRITE) && writer != Py_None
            && ready_or_removed(loop, append, writer, str_remove_writer, fileobj) < 0) {
            Py_DECREF(key);
            goto error;
        }
        Py_DECREF(key);
    }
    if (events != stack_events) {
        PyMem_Free(events);
    }
    Py_RETURN_NONE;
error:
    if (events != stack_events) {
        PyMem_Free(events);
    }
    return NULL;
}
#endif

/* ------------------------------------------------------------------------------------ */

/* handle._context.run(handle._callback, *handle._args), as Context.run does it: NULL on
   an exception, from the callback or from entering or leaving the context. */
static PyObject *
run_in_context(PyObject *context, PyObject *callback, PyObject *args)
{
    if (PyContext_Enter(context) < 0) {
        return NULL;
    }
    PyObject *result = PyObject_Vectorcall(callback, &PyTuple_GET_ITEM(args, 0),
                                           PyTuple_GET_SIZE(args), NULL);
    if (PyContext_Exit(context) < 0) {
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

/* run_ready(ready, ntodo, stock_types, callback_failed) -> how many handles it took.
   The loop of _run_once that calls the ready callbacks, for the handles of ``stock_types``
   (whose _run is asyncio's own): each popped, skipped when cancelled, else its callback run
   in its context; an exception from it goes to ``callback_failed(handle, exc)``, except
   SystemExit and KeyboardInterrupt, which propagate (what is left stays queued). At the
   first handle of another kind, or with a context or arguments of another shape, it puts
   the handle back and returns: the Python loop goes on from there. */
static PyObject *
cio_run_ready(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "run_ready(ready, ntodo, stock_types, callback_failed)");
        return NULL;
    }
    if (!handle_fields_found) {
        PyErr_SetString(PyExc_RuntimeError, "run_ready(): asyncio.Handle has other slots");
        return NULL;
    }
    Py_ssize_t ntodo = PyLong_AsSsize_t(args[1]);
    if (ntodo == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *ready = args[0], *stock = args[2], *callback_failed = args[3];
    PyObject *popleft = PyObject_GetAttr(ready, str_popleft);
    if (popleft == NULL) {
        return NULL;
    }
    Py_ssize_t done = 0;
    for (; done < ntodo; done++) {
        PyObject *handle = PyObject_CallNoArgs(popleft);
        if (handle == NULL) {
            goto error;
        }
        int plain = 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(stock); k++) {
            plain |= (PyObject *)Py_TYPE(handle) == PyTuple_GET_ITEM(stock, k);
        }
        PyObject *cancelled = plain ? HANDLE_FIELD(handle, H_CANCELLED) : NULL;
        int skip = cancelled == NULL ? 0 : cancelled == Py_True ? 1 : cancelled == Py_False ? 0
                                                                      : PyObject_IsTrue(cancelled);
        if (skip != 0) {  /* (a cancelled handle's callback and arguments are None) */
            Py_DECREF(handle);
            if (skip < 0) {
                goto error;
            }
            continue;
        }
        PyObject *context = plain ? HANDLE_FIELD(handle, H_CONTEXT) : NULL;
        PyObject *callback = plain ? HANDLE_FIELD(handle, H_CALLBACK) : NULL;
        PyObject *call_args = plain ? HANDLE_FIELD(handle, H_ARGS) : NULL;
        if (cancelled == NULL || context == NULL || callback == NULL || call_args == NULL
            || !PyContext_CheckExact(context) || !PyTuple_CheckExact(call_args)) {
            /* Not ours to run: back at the head, for the Python loop. */
            PyObject *back = PyObject_CallMethodOneArg(ready, str_appendleft, handle);
            Py_DECREF(handle);
            if (back == NULL) {
                goto error;
            }
            Py_DECREF(back);
            break;
        }
        Py_INCREF(context);
        Py_INCREF(callback);
        Py_INCREF(call_args);
        PyObject *result = run_in_context(context, callback, call_args);
        Py_DECREF(context);
        Py_DECREF(callback);
        Py_DECREF(call_args);
        if (result == NULL) {
            if (PyErr_ExceptionMatches(PyExc_SystemExit)
                || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
                Py_DECREF(handle);
                goto error;
            }
            PyObject *exc = take_exception();
            result = PyObject_CallFunctionObjArgs(callback_failed, handle, exc, NULL);
            Py_XDECREF(exc);
            if (result == NULL) {
                Py_DECREF(handle);
                goto error;
            }
        }
        Py_DECREF(result);
        Py_DECREF(handle);
    }
    Py_DECREF(popleft);
    return PyLong_FromSsize_t(done);
error:
    Py_DECREF(popleft);
    return NULL;
}

static PyMethodDef module_methods[] = {
#ifdef __linux__
    {"poll", (PyCFunction)(void (*)(void))cio_poll, METH_FASTCALL,
     "poll(loop, epfd, timeout, fd_to_key, append)\n\n"
     "WheelEventLoop._poll_epoll's body: epoll_wait, then each ready descriptor's reader and\n"
     "writer appended (or, cancelled, removed through loop._remove_reader/_remove_writer)."},
#endif
    {"io_methods", (PyCFunction)(void (*)(void))cio_io_methods, METH_FASTCALL,
     "io_methods(cls, python_read_ready, stock_write, stock_get_write_buffer_size)\n"
     "-> (_read_ready, write, get_write_buffer_size)\n\n"
     "C methods for the socket transport class cls; each hands what it does not do itself\n"
     "to the Python function given."},
    {"run_ready", (PyCFunction)(void (*)(void))cio_run_ready, METH_FASTCALL,
     "run_ready(ready, ntodo, stock_types, callback_failed) -> how many handles it took\n\n"
     "The ready loop of WheelEventLoop._run_once for handles of stock_types; it stops at\n"
     "any other, for the Python loop to go on."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef cio_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "minidb.runtime._cio",
    .m_doc = "The loop's I/O turn in C; see minidb.runtime._loop for the Python twins.",
    .m_size = -1,
    .m_methods = module_methods,
};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) { goto error; }

PyMODINIT_FUNC
PyInit__cio(void)
{
    PyObject *m = PyModule_Create(&cio_module);
    if (m == NULL) {
        return NULL;
    }
    INTERN(str_data_received, "data_received");
    INTERN(str_fatal_error, "_fatal_error");
    INTERN(str_read_ready_cb, "_read_ready_cb");
    INTERN(str_on_eof, "_read_ready__on_eof");
    INTERN(str_cancelled, "_cancelled");
    INTERN(str_remove_reader, "_remove_reader");
    INTERN(str_remove_writer, "_remove_writer");
    INTERN(str_popleft, "popleft");
    INTERN(str_appendleft, "appendleft");
    /* asyncio's Handle keeps _cancelled in a slot: the poll reads it at its offset. */
    PyObject *events = PyImport_ImportModule("asyncio.events");
    if (events == NULL) {
        goto error;
    }
    handle_type = (PyTypeObject *)PyObject_GetAttrString(events, "Handle");
    Py_DECREF(events);
    if (handle_type == NULL) {
        goto error;
    }
    if (PyType_Check(handle_type)) {
        int found = member_offsets(handle_type, handle_fields, H_FIELDS, handle_offsets);
        if (found < 0) {
            goto error;
        }
        handle_fields_found = found == H_FIELDS;
    }
    PyObject *socket_module = PyImport_ImportModule("socket");
    if (socket_module == NULL) {
        goto error;
    }
    socket_type = PyObject_GetAttrString(socket_module, "socket");
    Py_DECREF(socket_module);
    if (socket_type == NULL) {
        goto error;
    }
    if (PyModule_AddIntConstant(m, "EVENT_READ", EVENT_READ) < 0
        || PyModule_AddIntConstant(m, "EVENT_WRITE", EVENT_WRITE) < 0) {
        goto error;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
