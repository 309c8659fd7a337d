/* RespConnection.data_received in C: the express lane's gate, its C call and the bookkeeping
 * of its two common outcomes, reading the connection's hot state at slot offsets; and the
 * two methods that run once per request beside it at -P 1, turn_answered (the loop turn's
 * replies written) and output_room (asked by the lane's run), each the twin of its Python
 * method in server/_connection.py.
 *
 * The Python method (``RespConnection.data_received`` in _connection.py, kept as
 * ``data_received_py``) is the reference; this is its twin, line for line:
 *
 *   1. the gate: nothing of this connection in flight, deferred, backlogged, draining,
 *      closed or in the loop turn's group, its decoder not closing and holding nothing, its
 *      session in its plain state. Otherwise Connection.data_received (the general way);
 *   2. the lane: ``requests.decoder.take_whole(data, express, head + (bucket, protocol,
 *      clock or None, not owner.turn, turn or None))``; None: Connection.data_received;
 *   3. what it took: when every command was served inline (reads) or ran in the loop turn's
 *      group (writes), the counting, the write and the join of the turn here; any other
 *      outcome goes to the Python ``_express_taken``, which does all of step 3.
 *
 * Why C: at redis-benchmark -P 1 this runs once per request, and as Python its checks and
 * counting were about 250 bytecodes per SET (with plain_ready, join_turn and their frames).
 * Read here at their offsets (src/minidb/_cslots.h), the fields cost a load each.
 *
 * What is not the exact class whose offsets were resolved (a subclass, a stand-in), or a
 * field left unset, goes to the Python method before anything is done, so it behaves (and
 * fails) as Python does. An exception in steps 2 and 3 is handed to ``self._fail`` as the
 * Python method's ``except Exception`` does; a BaseException propagates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../../_cexceptions.h"
#include "../../_cint.h"
#include "../../_cslots.h"

/* The slots read or set, per class, by offset in its instances (resolved once). */
enum {
    C_PENDING, C_DEFERRED, C_BACKLOG, C_DRAINING, C_CLOSED, C_IN_TURN, C_IDLE_FROM, C_LOOP_TIME,
    C_REQUESTS, C_TRANSPORT, C_OUTPUT_PAUSED, C_CUT, C_SOFT_LIMIT, C_REQUESTS_DECODER,
    C_SESSION, C_OWNER, C_EXECUTOR, C_HEAD, C_UNIX_TIME, C_SIDE, C_FIELDS
};
static const char *const connection_fields[C_FIELDS] = {
    "_pending", "_deferred", "_backlog", "_draining", "_closed", "_in_turn", "_idle_from",
    "_loop_time", "requests", "_transport", "_output_paused", "_cut", "_soft_limit",
    "requests_decoder", "session", "_owner", "_executor", "_express_head", "_unix_time", "side",
};
enum { R_CLOSING, R_HELD, R_DECODER, R_RUNS, R_FIELDS };
static const char *const requests_fields[R_FIELDS] = {"closing", "held", "decoder", "runs"};
enum {
    S_QUEUE, S_AUTHENTICATED, S_CLOSING, S_RESTRICTED, S_BUCKET, S_PROTOCOL,
    S_LAST_INTERACTION, S_PLAIN_TAKEN, S_LAST_PLAIN, S_FIELDS
};
static const char *const session_fields[S_FIELDS] = {
    "_queue", "authenticated", "closing", "restricted", "bucket", "protocol",
    "last_interaction", "plain_taken", "last_plain",
};
enum {
    O_WAITING, O_MAILBOX, O_TURN_JOURNAL, O_CLOCK, O_TURN, O_INLINE, O_TURN_REQUESTS, O_FIELDS
};
static const char *const owner_fields[O_FIELDS] = {
    "waiting", "mailbox", "turn_journal", "clock", "turn", "inline", "_turn_requests",
};
enum { M_QUEUED, M_FIELDS };
static const char *const mailbox_fields[M_FIELDS] = {"queued"};

/* One class and its resolved offsets. */
typedef struct {
    PyTypeObject *type;
    const char *const *names;
    int n;
    Py_ssize_t offsets[C_FIELDS];  /* the largest of the field counts */
} Layout;

enum { L_CONNECTION, L_REQUESTS, L_SESSION, L_OWNER, L_MAILBOX, LAYOUTS };
static Layout layouts[LAYOUTS] = {
    {NULL, connection_fields, C_FIELDS, {0}},
    {NULL, requests_fields, R_FIELDS, {0}},
    {NULL, session_fields, S_FIELDS, {0}},
    {NULL, owner_fields, O_FIELDS, {0}},
    {NULL, mailbox_fields, M_FIELDS, {0}},
};

/* The Python methods the C ones replace (the reference, and the way for what C does not
 * take), Connection.data_received (the general way) and store.express (lent to take_whole). */
static PyObject *python_data_received, *python_turn_answered, *python_output_room;
static PyObject *connection_data_received, *express_function;
static PyTypeObject *deque_type;  /* collections.deque: the connection's queues */

static PyObject *str_take_whole, *str_express_taken, *str_write, *str_fail,
    *str_data_received, *str_turn_answered, *str_open_turn, *str_get_write_buffer_size, *str_hard_limit,
    *str_drop_for_output, *str_flush;

/* The slot ``i`` of ``obj`` in layout ``l``: a borrowed reference, NULL when unset. */
#define SLOT(l, obj, i) (*(PyObject **)((char *)(obj) + layouts[l].offsets[i]))
#define CONN(i) SLOT(L_CONNECTION, self, i)

/* Whether every slot of ``obj`` in layout ``l`` is set, ``obj`` being of that exact class. */
static int
complete(int l, PyObject *obj)
{
    if (Py_TYPE(obj) != layouts[l].type) {
        return 0;
    }
    for (int i = 0; i < layouts[l].n; i++) {
        if (SLOT(l, obj, i) == NULL) {
            return 0;
        }
    }
    return 1;
}

/* The truth of a field whose type's truth runs no Python code (a bool, None, an int, a list,
 * a deque), or -1 for any other (then the Python method decides, before anything is done). */
static int
plain_truth(PyObject *value)
{
    if (value == Py_True) {
        return 1;
    }
    if (value == Py_False || value == Py_None) {
        return 0;
    }
    if (PyList_CheckExact(value)) {
        return PyList_GET_SIZE(value) != 0;
    }
    if (PyLong_CheckExact(value) || Py_IS_TYPE(value, deque_type)) {
        return PyObject_IsTrue(value);  /* (a C length or sign; it cannot fail) */
    }
    return -1;
}

/* The slot ``i`` of ``obj`` (borrowed), or NULL with the AttributeError Python would raise:
 * for a read after a call out to Python, which may have deleted it. */
static PyObject *
field(int l, PyObject *obj, int i)
{
    PyObject *value = SLOT(l, obj, i);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(obj)->tp_name, layouts[l].names[i]);
    }
    return value;
}

/* Set a slot to ``value`` (a new reference, stolen; NULL: an error, nothing set). */
static int
set_slot(int l, PyObject *obj, int i, PyObject *value)
{
    if (value == NULL) {
        return -1;
    }
    Py_XSETREF(SLOT(l, obj, i), value);
    return 0;
}

/* ``obj.field += by`` for an int slot (a counter, ``by`` >= 0: an exact int in range is
 * added in C, anything else by ``+``). */
static int
add_to_slot(int l, PyObject *obj, int i, Py_ssize_t by)
{
    PyObject *now = field(l, obj, i);
    if (now == NULL) {
        return -1;
    }
    return set_slot(l, obj, i, int_plus(now, by));
}

static PyObject *
call_method0(PyObject *obj, PyObject *name)
{
    return PyObject_VectorcallMethod(name, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *
call_method1(PyObject *obj, PyObject *name, PyObject *arg)
{
    PyObject *args[2] = {obj, arg};
    return PyObject_VectorcallMethod(name, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* The Python method, as is: what does not meet step 1's conditions. */
static PyObject *
in_python(PyObject *function, PyObject *self, PyObject *data)
{
    PyObject *args[2] = {self, data};
    return PyObject_Vectorcall(function, args, 2, NULL);
}

/* transport.write(replies), then past the hard output limit (the write paused the
 * transport and left more unsent than it): dropped, as Connection._write does. */
static int
write_replies(PyObject *self, PyObject *transport, PyObject *replies)
{
    Py_INCREF(transport);
    PyObject *wrote = call_method1(transport, str_write, replies);
    PyObject *output_paused = wrote == NULL ? NULL : field(L_CONNECTION, self, C_OUTPUT_PAUSED);
    int paused = output_paused == NULL ? -1 : PyObject_IsTrue(output_paused);
    Py_XDECREF(wrote);
    if (paused > 0) {
        PyObject *size = call_method0(transport, str_get_write_buffer_size);
        PyObject *limit = size == NULL ? NULL : PyObject_GetAttr(self, str_hard_limit);
        int over = limit == NULL ? -1 : PyObject_RichCompareBool(size, limit, Py_GT);
        Py_XDECREF(size);
        Py_XDECREF(limit);
        if (over > 0) {
            PyObject *dropped = call_method1(self, str_drop_for_output, transport);
            over = dropped == NULL ? -1 : 0;
            Py_XDECREF(dropped);
        }
        paused = over;
    }
    Py_DECREF(transport);
    return paused < 0 ? -1 : 0;
}

/* ``count`` requests of the connection served without the mailbox (at once, or in the loop
 * turn's group): the idle timeout counts from now, and they are counted. */
static int
count_served(PyObject *self, PyObject *owner, Py_ssize_t count)
{
    PyObject *loop_time = field(L_CONNECTION, self, C_LOOP_TIME);
    if (loop_time == NULL
        || set_slot(L_CONNECTION, self, C_IDLE_FROM, PyObject_CallNoArgs(loop_time)) < 0
        || add_to_slot(L_CONNECTION, self, C_REQUESTS, count) < 0
        || add_to_slot(L_OWNER, owner, O_INLINE, count) < 0) {
        return -1;
    }
    return 0;
}

/* StoreOwner.join_turn(sink, executor, request, replies, count) in C, its twin: hold the
 * replies of ``request``, run in the loop turn's group, for end_turn (the turn opened first
 * if it is empty). */
static int
join_turn(PyObject *owner, PyObject *sink, PyObject *executor, PyObject *request,
          PyObject *replies, Py_ssize_t count)
{
    PyObject *turn = field(L_OWNER, owner, O_TURN);
    int open = turn == NULL ? -1 : PyObject_IsTrue(turn);
    if (open < 0) {
        return -1;
    }
    if (!open) {
        PyObject *opened = call_method0(owner, str_open_turn);
        if (opened == NULL) {
            return -1;
        }
        Py_DECREF(opened);
        turn = field(L_OWNER, owner, O_TURN);
        if (turn == NULL) {
            return -1;
        }
    }
    PyObject *entry = PyTuple_Pack(4, sink, executor, request, replies);
    if (entry == NULL) {
        return -1;
    }
    Py_INCREF(turn);
    int appended;
    if (PyList_CheckExact(turn)) {
        appended = PyList_Append(turn, entry);
    }
    else {
        PyObject *r = PyObject_CallMethod(turn, "append", "O", entry);
        appended = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(turn);
    Py_DECREF(entry);
    return appended < 0 ? -1 : add_to_slot(L_OWNER, owner, O_TURN_REQUESTS, count);
}

/* RespConnection._joined_turn(count) in C, its twin: ``count`` requests ran in the loop
 * turn's group, counted as served. */
static int
joined_turn(PyObject *self, PyObject *owner, Py_ssize_t count)
{
    Py_XSETREF(CONN(C_IN_TURN), Py_NewRef(Py_True));
    return count_served(self, owner, count);
}

/* Every command was served inline (served == end) or ran in the loop turn's group
 * (turned == end): the part of _express_taken those outcomes take, in its order. */
static int
common_outcome(PyObject *self, PyObject *session, PyObject *requests, PyObject *owner,
               PyObject *commands, Py_ssize_t end, Py_ssize_t served, PyObject *replies,
               Py_ssize_t turned, PyObject *turn_replies)
{
    /* session.plain_run(commands, 0, end), spelled out */
    if (add_to_slot(L_SESSION, session, S_PLAIN_TAKEN, end) < 0) {
        return -1;
    }
    Py_XSETREF(SLOT(L_SESSION, session, S_LAST_PLAIN), Py_NewRef(commands));
    Py_XSETREF(SLOT(L_REQUESTS, requests, R_RUNS), Py_NewRef(Py_True));
    if (served) {
        /* _served_inline and _write */
        if (count_served(self, owner, served) < 0) {
            return -1;
        }
        PyObject *transport = field(L_CONNECTION, self, C_TRANSPORT);
        if (transport == NULL || write_replies(self, transport, replies) < 0) {
            return -1;
        }
        if (served == end) {
            return 0;
        }
    }
    /* owner.join_turn(self, executor, (commands, bucket, protocol, side, served, turned),
     * turn_replies, count), then _joined_turn(count) */
    Py_ssize_t count = turned - served;
    PyObject *bucket = field(L_SESSION, session, S_BUCKET);
    PyObject *protocol = field(L_SESSION, session, S_PROTOCOL);
    PyObject *side = field(L_CONNECTION, self, C_SIDE);
    PyObject *executor = field(L_CONNECTION, self, C_EXECUTOR);
    if (bucket == NULL || protocol == NULL || side == NULL || executor == NULL) {
        return -1;
    }
    /* (commands, bucket, protocol, side, served, turned): a TurnRun */
    PyObject *request = PyTuple_New(6);
    PyObject *served_obj = PyLong_FromSsize_t(served), *turned_obj = PyLong_FromSsize_t(turned);
    if (request == NULL || served_obj == NULL || turned_obj == NULL) {
        Py_XDECREF(request);
        Py_XDECREF(served_obj);
        Py_XDECREF(turned_obj);
        return -1;
    }
    PyObject *items[6] = {Py_NewRef(commands), Py_NewRef(bucket), Py_NewRef(protocol),
                          Py_NewRef(side), served_obj, turned_obj};
    for (int k = 0; k < 6; k++) {
        PyTuple_SET_ITEM(request, k, items[k]);
    }
    int joined = join_turn(owner, self, executor, request, turn_replies, count);
    Py_DECREF(request);
    return joined < 0 ? -1 : joined_turn(self, owner, count);
}

/* Steps 2 and 3 (the connection, its decoder, session and owner checked complete). */
static int
take(PyObject *self, PyObject *data, PyObject *requests, PyObject *session, PyObject *owner,
     int idle, int no_turn)
{
    PyObject *head = CONN(C_HEAD);
    if (!PyTuple_CheckExact(head)) {
        PyErr_SetString(PyExc_TypeError, "the express lane's head is not a tuple");
        return -1;
    }
    PyObject *turn = idle ? SLOT(L_OWNER, owner, O_TURN_JOURNAL) : Py_None;
    Py_ssize_t n = PyTuple_GET_SIZE(head);
    PyObject *lane = PyTuple_New(n + 5);
    if (lane == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTuple_SET_ITEM(lane, i, Py_NewRef(PyTuple_GET_ITEM(head, i)));
    }
    PyTuple_SET_ITEM(lane, n, Py_NewRef(SLOT(L_SESSION, session, S_BUCKET)));
    PyTuple_SET_ITEM(lane, n + 1, Py_NewRef(SLOT(L_SESSION, session, S_PROTOCOL)));
    PyTuple_SET_ITEM(lane, n + 2, Py_NewRef(idle ? SLOT(L_OWNER, owner, O_CLOCK) : Py_None));
    PyTuple_SET_ITEM(lane, n + 3, Py_NewRef(no_turn ? Py_True : Py_False));
    PyTuple_SET_ITEM(lane, n + 4, Py_NewRef(turn));
    Py_INCREF(turn);  /* held for _express_taken: the call may replace the owner's */
    PyObject *decoder = Py_NewRef(SLOT(L_REQUESTS, requests, R_DECODER));
    PyObject *take_args[4] = {decoder, data, express_function, lane};
    PyObject *taken = PyObject_VectorcallMethod(
        str_take_whole, take_args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(decoder);
    Py_DECREF(lane);
    int result = -1;
    if (taken == NULL) {
        goto done;
    }
    if (taken == Py_None) {
        PyObject *r = in_python(connection_data_received, self, data);
        result = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        goto done;
    }
    /* commands, end, served, replies, turned, turn_replies = taken */
    Py_ssize_t end = -1, served = -1, turned = -1;
    if (PyTuple_CheckExact(taken) && PyTuple_GET_SIZE(taken) == 6
        && PyList_CheckExact(PyTuple_GET_ITEM(taken, 0))) {
        end = PyLong_AsSsize_t(PyTuple_GET_ITEM(taken, 1));
        served = PyLong_AsSsize_t(PyTuple_GET_ITEM(taken, 2));
        turned = PyLong_AsSsize_t(PyTuple_GET_ITEM(taken, 4));
        if (PyErr_Occurred()) {
            goto done;
        }
    }
    PyObject *commands = PyTuple_CheckExact(taken) ? PyTuple_GET_ITEM(taken, 0) : NULL;
    PyObject *transport = SLOT(L_CONNECTION, self, C_TRANSPORT);  /* (unset: to Python) */
    if (end <= 0 || end != PyList_GET_SIZE(commands) || (served != end && turned != end)
        || transport == NULL || transport == Py_None) {
        /* Another outcome (or a surprise): all of step 3 in Python. */
        PyObject *args[3] = {self, taken, turn};
        PyObject *r = PyObject_VectorcallMethod(
            str_express_taken, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        result = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        goto done;
    }
    /* Once per read, as Redis's readQueryFromClient does: CLIENT INFO's idle time. */
    PyObject *clock = field(L_CONNECTION, self, C_UNIX_TIME);
    PyObject *unix_time = clock == NULL ? NULL : PyObject_CallNoArgs(clock);
    if (set_slot(L_SESSION, session, S_LAST_INTERACTION, unix_time) < 0) {
        goto done;
    }
    result = common_outcome(self, session, requests, owner, commands, end, served,
                            PyTuple_GET_ITEM(taken, 3), turned, PyTuple_GET_ITEM(taken, 5));
done:
    Py_XDECREF(taken);
    Py_DECREF(turn);
    return result;
}

/* An Exception to self._fail(where, exc), as the Python methods' ``except Exception``;
 * None. A BaseException propagates. */
static PyObject *
contain(PyObject *self, PyObject *where)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return NULL;
    }
    PyObject *exc = take_exception();
    PyObject *args[3] = {self, where, exc};
    PyObject *r = PyObject_VectorcallMethod(str_fail, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    Py_XDECREF(exc);
    return r;
}

static PyObject *
data_received(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "data_received(data)");
        return NULL;
    }
    PyObject *data = args[0];
    if (!complete(L_CONNECTION, self)) {
        return in_python(python_data_received, self, data);
    }
    PyObject *requests = CONN(C_REQUESTS_DECODER), *session = CONN(C_SESSION);
    PyObject *owner = CONN(C_OWNER);
    if (!complete(L_REQUESTS, requests) || !complete(L_SESSION, session)
        || !complete(L_OWNER, owner)
        || !complete(L_MAILBOX, SLOT(L_OWNER, owner, O_MAILBOX))) {
        return in_python(python_data_received, self, data);
    }
    /* The gate, as the Python's ``or`` chain (with plain_ready()'s four fields), then
     * ``idle = owner.waiting and not owner.mailbox.queued`` and whether a turn is open: truth
     * tests that run no Python code (see plain_truth), so no field moves under them. */
    PyObject *gate[] = {
        CONN(C_PENDING), CONN(C_DEFERRED), CONN(C_BACKLOG), CONN(C_DRAINING), CONN(C_CLOSED),
        CONN(C_IN_TURN), SLOT(L_REQUESTS, requests, R_CLOSING),
        SLOT(L_REQUESTS, requests, R_HELD), SLOT(L_SESSION, session, S_CLOSING),
        SLOT(L_SESSION, session, S_RESTRICTED),
    };
    int busy = 0;
    for (size_t i = 0; i < sizeof(gate) / sizeof(gate[0]); i++) {
        int is = plain_truth(gate[i]);
        if (is < 0) {
            return in_python(python_data_received, self, data);
        }
        busy |= is;
    }
    int authenticated = plain_truth(SLOT(L_SESSION, session, S_AUTHENTICATED));
    int waiting = plain_truth(SLOT(L_OWNER, owner, O_WAITING));
    int queued = plain_truth(SLOT(L_MAILBOX, SLOT(L_OWNER, owner, O_MAILBOX), M_QUEUED));
    int turn_open = plain_truth(SLOT(L_OWNER, owner, O_TURN));
    if (authenticated < 0 || waiting < 0 || queued < 0 || turn_open < 0) {
        return in_python(python_data_received, self, data);
    }
    if (busy || !authenticated || SLOT(L_SESSION, session, S_QUEUE) != Py_None) {
        return in_python(connection_data_received, self, data);
    }
    int idle = waiting && !queued;
    Py_INCREF(self);
    Py_INCREF(requests);
    Py_INCREF(session);
    Py_INCREF(owner);
    int result = take(self, data, requests, session, owner, idle, !turn_open);
    PyObject *r = result < 0 ? contain(self, str_data_received) : Py_NewRef(Py_None);
    Py_DECREF(owner);
    Py_DECREF(session);
    Py_DECREF(requests);
    Py_DECREF(self);
    return r;
}

static PyMethodDef data_received_def = {
    "data_received", (PyCFunction)(void (*)(void))data_received, METH_FASTCALL,
    "RespConnection.data_received in C: the express lane, reading the connection's slots."
};

/* Connection.turn_answered in C (the Python method is the reference): the loop turn's group
 * is logged; write the replies of the run this connection ran in it, then whatever was
 * answered meanwhile (``flush``). Once per connection per turn: at -P 1, per write. */
static PyObject *
turn_answered(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !complete(L_CONNECTION, self)) {
        PyObject *call_args[2] = {self, nargs > 0 ? args[0] : NULL};
        if (nargs > 1) {
            PyErr_SetString(PyExc_TypeError, "turn_answered(replies)");
            return NULL;
        }
        return PyObject_Vectorcall(python_turn_answered, call_args, 1 + nargs, NULL);
    }
    Py_XSETREF(CONN(C_IN_TURN), Py_NewRef(Py_False));
    Py_INCREF(self);
    int result = 0;
    int closed = PyObject_IsTrue(CONN(C_CLOSED));
    PyObject *transport = closed < 0 ? NULL : field(L_CONNECTION, self, C_TRANSPORT);
    if (transport == NULL) {
        result = -1;
    }
    else if (!closed && transport != Py_None) {
        result = write_replies(self, transport, args[0]);
    }
    /* if self._pending or self._backlog or self._draining: self.flush() */
    static const int owed[] = {C_PENDING, C_BACKLOG, C_DRAINING};
    for (size_t i = 0; result == 0 && i < sizeof(owed) / sizeof(owed[0]); i++) {
        PyObject *value = field(L_CONNECTION, self, owed[i]);
        int is = value == NULL ? -1 : PyObject_IsTrue(value);
        if (is > 0) {
            PyObject *flushed = call_method0(self, str_flush);
            Py_XDECREF(flushed);
            result = flushed == NULL ? -1 : 1;
        }
        else if (is < 0) {
            result = -1;
        }
    }
    PyObject *r = result < 0 ? contain(self, str_turn_answered) : Py_NewRef(Py_None);
    Py_DECREF(self);
    return r;
}

static PyMethodDef turn_answered_def = {
    "turn_answered", (PyCFunction)(void (*)(void))turn_answered, METH_FASTCALL,
    "Connection.turn_answered in C: the turn's replies written, reading the connection's slots."
};

/* Connection.output_room in C (the Python method is the reference): bytes of replies the
 * owner may still build for this connection, its soft output limit less what is unsent;
 * -1 once it is cut or closed. The express lane asks it once per read it runs. */
static PyObject *
output_room(PyObject *self, PyObject *unused)
{
    if (!complete(L_CONNECTION, self)) {
        return PyObject_CallOneArg(python_output_room, self);
    }
    int cut = PyObject_IsTrue(CONN(C_CUT));
    int closed = cut != 0 ? cut : PyObject_IsTrue(CONN(C_CLOSED));
    if (cut < 0 || closed < 0) {
        return NULL;
    }
    PyObject *transport = field(L_CONNECTION, self, C_TRANSPORT);
    if (transport == NULL) {
        return NULL;
    }
    if (cut || closed || transport == Py_None) {
        return PyLong_FromLong(-1);
    }
    Py_INCREF(self);
    Py_INCREF(transport);
    PyObject *unsent = call_method0(transport, str_get_write_buffer_size);
    PyObject *limit = unsent == NULL ? NULL : field(L_CONNECTION, self, C_SOFT_LIMIT);
    PyObject *room = limit == NULL ? NULL : PyNumber_Subtract(limit, unsent);
    Py_XDECREF(unsent);
    Py_DECREF(transport);
    Py_DECREF(self);
    return room;
}

static PyMethodDef output_room_def = {
    "output_room", output_room, METH_NOARGS,
    "Connection.output_room in C: the room for replies, reading the connection's slots."
};

/* methods((connection_cls, requests_cls, session_cls, owner_cls, mailbox_cls), python, express)
 * -> {name: C method} for connection_cls (RespConnection): data_received, turn_answered and
 * output_room. ``python`` names the Python methods they replace (the same three) and
 * ``general_data_received`` (Connection.data_received). */
static PyObject *
methods(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != LAYOUTS
        || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "methods((connection_cls, requests_cls, session_cls, owner_cls, "
                        "mailbox_cls), python_methods, express)");
        return NULL;
    }
    if (layouts[L_CONNECTION].type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "methods() serves one connection class");
        return NULL;
    }
    PyObject *const *classes = &PyTuple_GET_ITEM(args[0], 0);
    for (int l = 0; l < LAYOUTS; l++) {
        if (!PyType_Check(classes[l])) {
            PyErr_Format(PyExc_TypeError, "%R is not a class", classes[l]);
            return NULL;
        }
        Layout *layout = &layouts[l];
        int found = member_offsets((PyTypeObject *)classes[l], layout->names, layout->n,
                                   layout->offsets);
        if (found < 0) {
            return NULL;
        }
        if (found < layout->n) {
            PyErr_Format(PyExc_TypeError, "%R has no plain slot %s", classes[l],
                         layout->names[found]);
            return NULL;
        }
    }
    struct {
        PyObject **slot;
        const char *name;
    } python[] = {
        {&python_data_received, "data_received"}, {&python_turn_answered, "turn_answered"},
        {&python_output_room, "output_room"}, {&connection_data_received, "general_data_received"},
    };
    PyObject *found[4];
    for (size_t i = 0; i < 4; i++) {
        found[i] = PyDict_GetItemString(args[1], python[i].name);
        if (found[i] == NULL || !PyCallable_Check(found[i])) {
            PyErr_Format(PyExc_TypeError, "methods() needs the Python %s", python[i].name);
            return NULL;
        }
    }
    PyTypeObject *tp = (PyTypeObject *)classes[L_CONNECTION];
    PyMethodDef *defs[] = {&data_received_def, &turn_answered_def, &output_room_def};
    PyObject *made = PyDict_New();
    for (size_t i = 0; made != NULL && i < sizeof(defs) / sizeof(defs[0]); i++) {
        PyObject *method = PyDescr_NewMethod(tp, defs[i]);
        if (method == NULL || PyDict_SetItemString(made, defs[i]->ml_name, method) < 0) {
            Py_XDECREF(method);
            Py_CLEAR(made);
            break;
        }
        Py_DECREF(method);
    }
    if (made == NULL) {
        return NULL;
    }
    for (int l = 0; l < LAYOUTS; l++) {
        layouts[l].type = (PyTypeObject *)Py_NewRef(classes[l]);
    }
    for (size_t i = 0; i < 4; i++) {
        *python[i].slot = Py_NewRef(found[i]);
    }
    express_function = Py_NewRef(args[2]);
    return made;
}

static PyMethodDef module_methods[] = {
    {"methods", (PyCFunction)(void (*)(void))methods, METH_FASTCALL,
     "methods((connection_cls, requests_cls, session_cls, owner_cls, mailbox_cls), "
     "python_methods, express) -> {name: method}: RespConnection's C data_received, "
     "turn_answered and output_room."},
    {NULL, NULL, 0, NULL},
};

static int
module_exec(PyObject *m)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&str_take_whole, "take_whole"}, {&str_express_taken, "_express_taken"},
        {&str_write, "write"}, {&str_fail, "_fail"},
        {&str_data_received, "data_received"}, {&str_turn_answered, "turn_answered"}, {&str_open_turn, "_open_turn"},
        {&str_get_write_buffer_size, "get_write_buffer_size"}, {&str_flush, "flush"},
        {&str_hard_limit, "_hard_limit"}, {&str_drop_for_output, "_drop_for_output"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) {
                return -1;
            }
        }
    }
    if (deque_type == NULL) {
        PyObject *collections = PyImport_ImportModule("collections");
        PyObject *deque = collections == NULL ? NULL
                                              : PyObject_GetAttrString(collections, "deque");
        Py_XDECREF(collections);
        if (deque == NULL) {
            return -1;
        }
        if (!PyType_Check(deque)) {
            Py_DECREF(deque);
            PyErr_SetString(PyExc_TypeError, "collections.deque is not a class");
            return -1;
        }
        deque_type = (PyTypeObject *)deque;
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cconnection",
    "RespConnection.data_received in C (see _cconnection.c); _connection.py is the reference.",
    0, module_methods, module_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cconnection(void)
{
    return PyModuleDef_Init(&module_def);
}
