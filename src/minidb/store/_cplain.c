/* minidb.store._cplain: a run of plain Redis commands executed in C (optional accelerator).
 *
 * The C twin of ``minidb.store._plainrun.run_plain_python`` (theory of operation: the docstring
 * of ``_plainrun.py``). One call runs a run of decoded commands (argv lists) of one connection
 * against the keyspace, in order, and returns every reply in one buffer:
 *
 *     run(ks, journal, argvs, start, bucket, protocol, now_ms, room, max_reply, calls,
 *         fallback) -> (next, replies, room)
 *
 * For each command from ``argvs[start]`` on, while ``room`` is not negative: if it is one this
 * file knows (GET, SET without options, MGET, MSET, DEL, UNLINK, EXISTS, INCR, DECR, INCRBY,
 * DECRBY, TTL, PTTL, PING) and its case is the plain one (the keys hold strings without a
 * deadline or with one not yet passed, nobody WATCHes when it writes, the bucket has no SCAN
 * index when it adds or removes keys, no error to answer, the reply within ``max_reply``), it
 * runs here: the bucket's dict is changed in place, the change is noted in ``journal`` exactly
 * as ``Keyspace`` notes it (a ``KeyUndo`` per key replaced, one closed group of ``Put`` /
 * ``Remove`` ops per command) and the reply is encoded into the buffer. Anything else is
 * decided before anything is changed and handed to ``fallback(argv)``, the Python engine,
 * whose reply is copied in its place. So this file never decides an error, a lazy expiry or a
 * wrong type: the Python code does, and the two cannot disagree on one.
 *
 * ``calls`` counts each command run here under its name as sent (the fallback counts its own).
 *
 * With ``fallback`` None the run is a connection's inline read (the owner idle): it runs
 * only reads, only as far as they are plain, and stops at the first command that is not.
 * ``express`` also runs one with writes (``run_with``): a run of the loop turn's group, with
 * the owner's journal, which stops at the first command Python must run.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../_cint.h"
#include "../_cslots.h"

#define MAX_KEY_BYTES (64 * 1024)

/* Bound once by ``bind``: the named tuples the journal holds and the keyspace's record type. */
static PyObject *KeyUndo, *PutOp, *RemoveOp, *Expiring;

static PyObject *one; /* the int 1 */

static PyObject *s_turn_answered; /* the method answer_turn calls on each sink */

/* The attributes a run reads and sets on the keyspace, the journal and an expiring record:
 * at their slots' offsets (``SlotAttr``, _cslots.h), a load each, for the classes that slot
 * them; a getattr each for anything else. */
static SlotAttr s_buckets, s_watched, s_indexes, s_sorted, s_keys, s_max_value, s_clock_ms,
    s_records, s_undo, s_open, s_value, s_tick;

/* PyLong_AsLongLong, without its byte-array path for an int of more than one digit (on
 * 3.11: a millisecond clock's, converted a few times per run), raising as it raises. */
static long long
as_long_long(PyObject *obj)
{
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to C long long");
        return -1;
    }
    return value;
}

/* -- the reply buffer ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Out;

static int
out_reserve(Out *o, Py_ssize_t extra)
{
    if (o->len + extra <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *data = PyMem_Realloc(o->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->data = data;
    o->cap = cap;
    return 0;
}

static int
out_put(Out *o, const char *s, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->data + o->len, s, n);
    o->len += n;
    return 0;
}

/* ``v`` in decimal at ``p`` (at most 20 bytes); its length. By hand: ``snprintf`` cost ~800
   instructions a call, more than the rest of a GET's run. */
static int
format_int(char *p, long long v)
{
    char tmp[20];
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    int k = 0, n = 0;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        p[n++] = '-';
    while (k)
        p[n++] = tmp[--k];
    return n;
}

/* ``<prefix><n>\r\n``: an integer reply, an array or a bulk header. */
static int
out_header(Out *o, char prefix, long long n)
{
    char tmp[32];
    int k = 1 + format_int(tmp + 1, n);
    tmp[0] = prefix;
    tmp[k++] = '\r';
    tmp[k++] = '\n';
    return out_put(o, tmp, k);
}

static int
out_bulk(Out *o, PyObject *value)
{
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    if (out_header(o, '$', n) < 0 || out_put(o, PyBytes_AS_STRING(value), n) < 0)
        return -1;
    return out_put(o, "\r\n", 2);
}

static int
out_null(Out *o, int protocol)
{
    return protocol == 3 ? out_put(o, "_\r\n", 3) : out_put(o, "$-1\r\n", 5);
}

/* The size of ``out_bulk``'s output for a value of ``n`` bytes. */
static Py_ssize_t
bulk_size(Py_ssize_t n)
{
    char tmp[24];
    return 1 + format_int(tmp, n) + 2 + n + 2;
}

/* -- the keyspace as one run sees it ----------------------------------------------------- */

typedef struct {
    PyObject *ks, *journal, *bucket;
    PyObject *buckets;  /* ks._buckets (new reference) */
    PyObject *records;  /* journal.records (new reference) */
    PyObject *undo;     /* journal.undo (new reference) */
    int watched;        /* someone WATCHes some key: writes go to Python */
    int indexed;        /* this bucket keeps a SCAN index or a sorted list */
    Py_ssize_t max_value;
    long long now_ms;
    int protocol;
    Py_ssize_t max_reply;
    Py_ssize_t keys_delta; /* keys added less keys removed, not yet added to ks._keys */
    int reads_only;        /* no fallback: stop at a write, or at what needs Python */
    PyObject *read_bucket; /* a reads-only run's bucket dict (borrowed: nothing it runs can
                            * add or drop a bucket), once looked up */
    int read_bucket_known;
} Run;

enum { DONE = 1, FALLBACK = 0, FAILED = -1 };

static void
run_release(Run *r)
{
    Py_CLEAR(r->buckets);
    Py_CLEAR(r->records);
    Py_CLEAR(r->undo);
}

static int
truthy_attr(PyObject *obj, SlotAttr *name)
{
    PyObject *value = slot_attr_get(name, obj);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static int
contains_attr(PyObject *obj, SlotAttr *name, PyObject *key)
{
    PyObject *value = slot_attr_get(name, obj);
    if (value == NULL)
        return -1;
    int found = PySequence_Contains(value, key);
    Py_DECREF(value);
    return found;
}

/* Read what the run needs of the keyspace to read (again after Python ran); what a write
 * needs besides is read by ``run_load_writes`` at the first write. */
static int
run_load(Run *r)
{
    run_release(r);
    r->read_bucket_known = 0;
    r->buckets = slot_attr_get(&s_buckets, r->ks);
    if (r->buckets == NULL)
        return -1;
    if (!PyDict_CheckExact(r->buckets)) {
        PyErr_SetString(PyExc_TypeError, "keyspace of an unexpected shape");
        return -1;
    }
    return 0;
}

/* The journal's two lists, and whether someone WATCHes a key. */
static int
load_journal(Run *r)
{
    r->records = slot_attr_get(&s_records, r->journal);
    r->undo = slot_attr_get(&s_undo, r->journal);
    if (r->records == NULL || r->undo == NULL)
        return -1;
    if (!PyList_CheckExact(r->records) || !PyList_CheckExact(r->undo)) {
        PyErr_SetString(PyExc_TypeError, "journal of an unexpected shape");
        return -1;
    }
    r->watched = truthy_attr(r->ks, &s_watched);
    return r->watched < 0 ? -1 : 0;
}

/* The journal's lists and the keyspace's write conditions, once per run (and again after
 * Python ran): a run of reads never reads them. */
static int
run_load_writes(Run *r)
{
    if (r->records != NULL)
        return 0;
    if (load_journal(r) < 0)
        return -1;
    int index = contains_attr(r->ks, &s_indexes, r->bucket);
    int sorted = index == 0 ? contains_attr(r->ks, &s_sorted, r->bucket) : 0;
    if (index < 0 || sorted < 0)
        return -1;
    r->indexed = index || sorted;
    PyObject *max_value = slot_attr_get(&s_max_value, r->ks);
    if (max_value == NULL)
        return -1;
    r->max_value = PyLong_AsSsize_t(max_value);
    Py_DECREF(max_value);
    return PyErr_Occurred() ? -1 : 0;
}

/* Add the keys counted so far to ks._keys (before Python reads it, and at the end). */
static int
run_settle_keys(Run *r)
{
    if (r->keys_delta == 0)
        return 0;
    PyObject *keys = slot_attr_get(&s_keys, r->ks);
    if (keys == NULL)
        return -1;
    PyObject *delta = PyLong_FromSsize_t(r->keys_delta);
    PyObject *sum = delta ? PyNumber_Add(keys, delta) : NULL;
    Py_DECREF(keys);
    Py_XDECREF(delta);
    if (sum == NULL)
        return -1;
    int rc = slot_attr_set(&s_keys, r->ks, sum);
    Py_DECREF(sum);
    if (rc == 0)
        r->keys_delta = 0;
    return rc;
}

/* A run that failed: what ran stays run (the journal holds it, the owner rolls back a failed
 * group); only the count of keys must still be right. The error set is kept. */
static void
run_fail(Run *r)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (run_settle_keys(r) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
    run_release(r);
}

/* A named tuple of ``type`` built from ``n`` items (references stolen; NULL items fail). */
static PyObject *
named(PyObject *type, Py_ssize_t n, PyObject **items)
{
    PyObject *tuple = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL || tuple == NULL) {
            for (Py_ssize_t k = i; k < n; k++)
                Py_XDECREF(items[k]);
            Py_XDECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    return tuple;
}

static PyObject *
new_ref(PyObject *obj)
{
    Py_INCREF(obj);
    return obj;
}

/* journal.undo.append(KeyUndo(bucket, key, old or None, None)) */
static int
note_undo(Run *r, PyObject *key, PyObject *old)
{
    PyObject *items[4] = {new_ref(r->bucket), new_ref(key), new_ref(old ? old : Py_None),
                          new_ref(Py_None)};
    PyObject *entry = named(KeyUndo, 4, items);
    if (entry == NULL)
        return -1;
    int rc = PyList_Append(r->undo, entry);
    Py_DECREF(entry);
    return rc;
}

/* group.append(Put(bucket, key, value, None)) */
static int
note_put(Run *r, PyObject *group, PyObject *key, PyObject *value)
{
    PyObject *items[4] = {new_ref(r->bucket), new_ref(key), new_ref(value), new_ref(Py_None)};
    PyObject *op = named(PutOp, 4, items);
    if (op == NULL)
        return -1;
    int rc = PyList_Append(group, op);
    Py_DECREF(op);
    return rc;
}

static int
note_remove(Run *r, PyObject *group, PyObject *key)
{
    PyObject *items[2] = {new_ref(r->bucket), new_ref(key)};
    PyObject *op = named(RemoveOp, 2, items);
    if (op == NULL)
        return -1;
    int rc = PyList_Append(group, op);
    Py_DECREF(op);
    return rc;
}

/* journal.records.append(group), unless it is empty (an empty group is no record). */
static int
close_group(Run *r, PyObject *group)
{
    return PyList_GET_SIZE(group) ? PyList_Append(r->records, group) : 0;
}

/* The end of a write answered with an integer: its group closed (``rc`` 0 so far), the reply
 * encoded; ``group`` released. */
static int
end_write(Run *r, PyObject *group, int rc, Out *o, long long reply)
{
    if (rc == 0)
        rc = close_group(r, group);
    Py_XDECREF(group);
    if (rc < 0 || out_header(o, ':', reply) < 0)
        return FAILED;
    return DONE;
}

/* The bucket's dict (borrowed), or NULL with no error set if it has none. */
static PyObject *
bucket_dict(Run *r)
{
    return PyDict_GetItemWithError(r->buckets, r->bucket);
}

enum { F_MISSING, F_PLAIN, F_EXPIRING, F_OTHER };

/* What ``key`` holds, for a read: F_MISSING; F_PLAIN (bytes, no deadline) or F_EXPIRING (a
 * live deadline, in *tick) with the bytes in *value (a new reference); F_OTHER for anything
 * Python must decide (a deadline passed: the lazy expiry is Python's; a value not bytes);
 * -1 on error. */
static int
lookup(Run *r, PyObject *key, PyObject **value, long long *tick)
{
    *value = NULL;
    PyObject *found;
    if (r->read_bucket_known) {
        found = r->read_bucket;
    }
    else {
        found = bucket_dict(r);
        if (found == NULL && PyErr_Occurred())
            return -1;
        if (r->reads_only) {
            r->read_bucket = found;
            r->read_bucket_known = 1;
        }
    }
    if (found == NULL)
        return F_MISSING;
    PyObject *stored = PyDict_GetItemWithError(found, key);
    if (stored == NULL)
        return PyErr_Occurred() ? -1 : F_MISSING;
    if (PyBytes_CheckExact(stored)) {
        *value = new_ref(stored);
        return F_PLAIN;
    }
    if ((PyObject *)Py_TYPE(stored) != Expiring)
        return F_OTHER;
    PyObject *deadline = slot_attr_get(&s_tick, stored);
    if (deadline == NULL)
        return -1;
    long long when = as_long_long(deadline);
    Py_DECREF(deadline);
    if (when == -1 && PyErr_Occurred())
        return -1;
    if (when <= r->now_ms)
        return F_OTHER;
    PyObject *inner = slot_attr_get(&s_value, stored);
    if (inner == NULL)
        return -1;
    if (!PyBytes_CheckExact(inner)) {
        Py_DECREF(inner);
        return F_OTHER;
    }
    *value = inner;
    *tick = when;
    return F_EXPIRING;
}

/* Redis's string2ll, narrowed: an optional '-', digits, no leading zero, no "-0", in range.
 * Anything it refuses goes to Python, which is the judge of what is a number. */
static int
parse_int64(const char *s, Py_ssize_t n, long long *out)
{
    int negative = 0;
    if (n > 0 && s[0] == '-') {
        negative = 1;
        s++;
        n--;
    }
    if (n <= 0 || n > 19 || (s[0] == '0' && (n > 1 || negative)))
        return 0;
    unsigned long long v = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return 0;
        v = v * 10 + (unsigned long long)(s[k] - '0');
    }
    if (negative) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return 0;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    }
    else {
        if (v > (unsigned long long)LLONG_MAX)
            return 0;
        *out = (long long)v;
    }
    return 1;
}

/* -- the commands ------------------------------------------------------------------------- */

static int
cmd_get(Run *r, PyObject *argv, Out *o)
{
    PyObject *value;
    long long tick;
    int kind = lookup(r, PyList_GET_ITEM(argv, 1), &value, &tick);
    if (kind < 0)
        return FAILED;
    if (kind == F_OTHER)
        return FALLBACK;
    if (kind == F_MISSING)
        return out_null(o, r->protocol) < 0 ? FAILED : DONE;
    int rc = DONE;
    if (bulk_size(PyBytes_GET_SIZE(value)) > r->max_reply)
        rc = FALLBACK; /* Python words the refusal */
    else if (out_bulk(o, value) < 0)
        rc = FAILED;
    Py_DECREF(value);
    return rc;
}

static int
cmd_mget(Run *r, PyObject *argv, Out *o)
{
    Py_ssize_t n = PyList_GET_SIZE(argv) - 1;
    PyObject **values = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (values == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    int rc = DONE;
    Py_ssize_t total = 16;
    for (Py_ssize_t i = 0; i < n && rc == DONE; i++) {
        long long tick;
        int kind = lookup(r, PyList_GET_ITEM(argv, i + 1), &values[i], &tick);
        if (kind < 0)
            rc = FAILED;
        else if (kind == F_OTHER)
            rc = FALLBACK;
        else
            total += values[i] ? bulk_size(PyBytes_GET_SIZE(values[i])) : 5;
    }
    if (rc == DONE && total > r->max_reply)
        rc = FALLBACK;
    if (rc == DONE && out_header(o, '*', n) < 0)
        rc = FAILED;
    for (Py_ssize_t i = 0; i < n && rc == DONE; i++) {
        if ((values[i] ? out_bulk(o, values[i]) : out_null(o, r->protocol)) < 0)
            rc = FAILED;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(values[i]);
    PyMem_Free(values);
    return rc;
}

static int
cmd_exists(Run *r, PyObject *argv, Out *o)
{
    long long count = 0;
    for (Py_ssize_t i = 1; i < PyList_GET_SIZE(argv); i++) {
        PyObject *value;
        long long tick;
        int kind = lookup(r, PyList_GET_ITEM(argv, i), &value, &tick);
        Py_XDECREF(value);
        if (kind < 0)
            return FAILED;
        if (kind == F_OTHER)
            return FALLBACK;
        count += kind != F_MISSING;
    }
    return out_header(o, ':', count) < 0 ? FAILED : DONE;
}

static int
cmd_ttl(Run *r, PyObject *argv, Out *o, int ms)
{
    PyObject *value;
    long long tick = 0;
    int kind = lookup(r, PyList_GET_ITEM(argv, 1), &value, &tick);
    Py_XDECREF(value);
    if (kind < 0)
        return FAILED;
    if (kind == F_OTHER)
        return FALLBACK;
    long long reply = -2;
    if (kind == F_PLAIN)
        reply = -1;
    else if (kind == F_EXPIRING)
        reply = ms ? tick - r->now_ms : (tick - r->now_ms + 500) / 1000;
    return out_header(o, ':', reply) < 0 ? FAILED : DONE;
}

/* Whether a write of ``key`` (which may add it) is the plain case; -1 on error. */
static int
writable(Run *r, PyObject *found, PyObject *key, PyObject **old)
{
    *old = PyDict_GetItemWithError(found, key);
    if (*old == NULL && PyErr_Occurred())
        return -1;
    if (*old != NULL)
        return PyBytes_CheckExact(*old);
    return !r->indexed && PyBytes_GET_SIZE(key) <= MAX_KEY_BYTES;
}

/* found[key] = value, journaled as KeyUndo + Put into ``group``. */
static int
put(Run *r, PyObject *found, PyObject *group, PyObject *key, PyObject *value)
{
    PyObject *old = PyDict_GetItemWithError(found, key);
    if (old == NULL && PyErr_Occurred())
        return -1;
    Py_XINCREF(old);
    int rc = note_undo(r, key, old);
    if (rc == 0)
        rc = note_put(r, group, key, value);
    if (rc == 0)
        rc = PyDict_SetItem(found, key, value);
    if (rc == 0 && old == NULL)
        r->keys_delta++;
    Py_XDECREF(old);
    return rc;
}

/* Run ``put`` of each (key, value) pair of argv[first:] as one command. */
static int
put_pairs(Run *r, PyObject *found, PyObject *argv, Py_ssize_t first)
{
    PyObject *group = PyList_New(0);
    if (group == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = first; i + 1 < PyList_GET_SIZE(argv) && rc == 0; i += 2)
        rc = put(r, found, group, PyList_GET_ITEM(argv, i), PyList_GET_ITEM(argv, i + 1));
    if (rc == 0)
        rc = close_group(r, group);
    Py_DECREF(group);
    return rc;
}

/* What every write checks first: DONE if it may go on, else its answer (FALLBACK in an
 * inline read or while someone WATCHes a key: Python's; FAILED). */
static int
begin_write(Run *r)
{
    if (r->reads_only)
        return FALLBACK;
    if (run_load_writes(r) < 0)
        return FAILED;
    return r->watched ? FALLBACK : DONE;
}

/* SET key value and MSET key value [key value ...]: every key plain, every size in bounds. */
static int
cmd_set(Run *r, PyObject *argv, Out *o)
{
    int go = begin_write(r);
    if (go != DONE)
        return go;
    Py_ssize_t n = PyList_GET_SIZE(argv);
    if (n % 2 == 0)
        return FALLBACK;
    PyObject *found = bucket_dict(r);
    if (found == NULL)
        return PyErr_Occurred() ? FAILED : FALLBACK;
    for (Py_ssize_t i = 1; i < n; i += 2) {
        PyObject *old;
        PyObject *key = PyList_GET_ITEM(argv, i), *value = PyList_GET_ITEM(argv, i + 1);
        if (PyBytes_GET_SIZE(key) > MAX_KEY_BYTES || PyBytes_GET_SIZE(value) > r->max_value)
            return FALLBACK;
        int plain = writable(r, found, key, &old);
        if (plain <= 0)
            return plain < 0 ? FAILED : FALLBACK;
    }
    if (put_pairs(r, found, argv, 1) < 0 || out_put(o, "+OK\r\n", 5) < 0)
        return FAILED;
    return DONE;
}

static int
cmd_del(Run *r, PyObject *argv, Out *o)
{
    int go = begin_write(r);
    if (go != DONE)
        return go;
    if (r->indexed)
        return FALLBACK;
    Py_ssize_t n = PyList_GET_SIZE(argv);
    PyObject *found = bucket_dict(r);
    if (found == NULL) {
        if (PyErr_Occurred())
            return FAILED;
        return out_header(o, ':', 0) < 0 ? FAILED : DONE;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        PyObject *stored = PyDict_GetItemWithError(found, PyList_GET_ITEM(argv, i));
        if (stored == NULL && PyErr_Occurred())
            return FAILED;
        if (stored != NULL && !PyBytes_CheckExact(stored))
            return FALLBACK; /* a deadline (maybe passed) or another type: Python's */
    }
    Py_INCREF(found);
    PyObject *group = PyList_New(0);
    long long removed = 0;
    int rc = group == NULL ? -1 : 0;
    for (Py_ssize_t i = 1; i < n && rc == 0 && PyDict_GET_SIZE(found); i++) {
        PyObject *key = PyList_GET_ITEM(argv, i);
        PyObject *old = PyDict_GetItemWithError(found, key);
        if (old == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            continue;
        }
        Py_INCREF(old);
        rc = note_undo(r, key, old);
        if (rc == 0)
            rc = note_remove(r, group, key);
        if (rc == 0)
            rc = PyDict_DelItem(found, key);
        Py_DECREF(old);
        if (rc == 0) {
            removed++;
            r->keys_delta--;
            if (PyDict_GET_SIZE(found) == 0)
                rc = PyDict_DelItem(r->buckets, r->bucket); /* an empty bucket goes */
        }
    }
    Py_DECREF(found);
    return end_write(r, group, rc, o, removed);
}

/* INCR, DECR (``delta`` given), INCRBY, DECRBY (``delta`` read from argv[2], times ``sign``). */
static int
cmd_incr(Run *r, PyObject *argv, Out *o, long long delta, int sign)
{
    int go = begin_write(r);
    if (go != DONE)
        return go;
    if (PyList_GET_SIZE(argv) == 3) {
        PyObject *arg = PyList_GET_ITEM(argv, 2);
        if (!parse_int64(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg), &delta))
            return FALLBACK;
        if (sign < 0) {
            if (delta == LLONG_MIN)
                return FALLBACK;
            delta = -delta;
        }
    }
    PyObject *key = PyList_GET_ITEM(argv, 1);
    PyObject *found = bucket_dict(r);
    if (found == NULL)
        return PyErr_Occurred() ? FAILED : FALLBACK;
    PyObject *old;
    int plain = writable(r, found, key, &old);
    if (plain <= 0)
        return plain < 0 ? FAILED : FALLBACK;
    long long current = 0;
    if (old != NULL && !parse_int64(PyBytes_AS_STRING(old), PyBytes_GET_SIZE(old), &current))
        return FALLBACK;
    if ((delta > 0 && current > LLONG_MAX - delta) || (delta < 0 && current < LLONG_MIN - delta))
        return FALLBACK; /* Python answers the overflow */
    long long result = current + delta;
    char digits[24];
    PyObject *value = PyBytes_FromStringAndSize(
        digits, format_int(digits, result));
    if (value == NULL)
        return FAILED;
    PyObject *group = PyList_New(0);
    int rc = group == NULL ? -1 : put(r, found, group, key, value);
    Py_DECREF(value);
    return end_write(r, group, rc, o, result);
}

static int
name_is(PyObject *name, const char *upper)
{
    Py_ssize_t n = PyBytes_GET_SIZE(name);
    if (n != (Py_ssize_t)strlen(upper))
        return 0;
    const char *s = PyBytes_AS_STRING(name);
    for (Py_ssize_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'a' && c <= 'z')
            c -= 32;
        if (c != upper[i])
            return 0;
    }
    return 1;
}

/* One command: DONE (its reply is in ``o``), FALLBACK (nothing changed) or FAILED. */
static int
dispatch(Run *r, PyObject *argv, Out *o)
{
    if (!PyList_CheckExact(argv))
        return FALLBACK;
    Py_ssize_t argc = PyList_GET_SIZE(argv);
    if (argc == 0)
        return FALLBACK;
    for (Py_ssize_t i = 0; i < argc; i++) {
        if (!PyBytes_CheckExact(PyList_GET_ITEM(argv, i)))
            return FALLBACK;
    }
    PyObject *name = PyList_GET_ITEM(argv, 0);
    switch (PyBytes_GET_SIZE(name)) {
    case 3:
        if (argc == 2 && name_is(name, "GET"))
            return cmd_get(r, argv, o);
        if (argc == 3 && name_is(name, "SET"))
            return cmd_set(r, argv, o);
        if (argc >= 2 && name_is(name, "DEL"))
            return cmd_del(r, argv, o);
        if (argc == 2 && name_is(name, "TTL"))
            return cmd_ttl(r, argv, o, 0);
        break;
    case 4:
        if (argc >= 2 && name_is(name, "MGET"))
            return cmd_mget(r, argv, o);
        if (argc >= 3 && name_is(name, "MSET"))
            return cmd_set(r, argv, o);
        if (argc == 2 && name_is(name, "INCR"))
            return cmd_incr(r, argv, o, 1, 1);
        if (argc == 2 && name_is(name, "DECR"))
            return cmd_incr(r, argv, o, -1, 1);
        if (argc == 2 && name_is(name, "PTTL"))
            return cmd_ttl(r, argv, o, 1);
        if (argc == 1 && name_is(name, "PING"))
            return out_put(o, "+PONG\r\n", 7) < 0 ? FAILED : DONE;
        break;
    case 6:
        if (argc >= 2 && name_is(name, "EXISTS"))
            return cmd_exists(r, argv, o);
        if (argc >= 2 && name_is(name, "UNLINK"))
            return cmd_del(r, argv, o);
        if (argc == 3 && name_is(name, "INCRBY"))
            return cmd_incr(r, argv, o, 0, 1);
        if (argc == 3 && name_is(name, "DECRBY"))
            return cmd_incr(r, argv, o, 0, -1);
        break;
    }
    return FALLBACK;
}

/* Whether ``a`` and ``b`` (bytes) hold the same bytes. */
static int
same_bytes(PyObject *a, PyObject *b)
{
    return a == b
           || (PyBytes_CheckExact(a) && PyBytes_CheckExact(b)
               && PyBytes_GET_SIZE(a) == PyBytes_GET_SIZE(b)
               && memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), PyBytes_GET_SIZE(a)) == 0);
}

/* Commands counted per name in ``calls`` (name as sent -> count), as the executor counts them:
 * a run of one name adds to the dict once, not once a command. */
typedef struct {
    PyObject *calls;
    PyObject *name; /* borrowed: an argv's, alive while the run is */
    long long pending;
} Counts;

static int
counts_flush(Counts *c)
{
    if (c->pending == 0)
        return 0;
    PyObject *seen = PyDict_GetItemWithError(c->calls, c->name);
    if (seen == NULL && PyErr_Occurred())
        return -1;
    PyObject *count = seen ? int_plus(seen, c->pending) : PyLong_FromLongLong(c->pending);
    if (count == NULL)
        return -1;
    int rc = PyDict_SetItem(c->calls, c->name, count);
    Py_DECREF(count);
    if (rc == 0)
        c->pending = 0;
    return rc;
}

static int
count_call(Counts *c, PyObject *name)
{
    if (c->pending && !same_bytes(name, c->name) && counts_flush(c) < 0)
        return -1;
    if (c->pending == 0)
        c->name = name;
    c->pending++;
    return 0;
}

/* What a run returns: where it stopped, its replies (a new reference) and the room left. */
typedef struct {
    Py_ssize_t next;
    PyObject *replies;
    long long room;
} Ran;

/* ``run``'s body, its result in ``ran`` (0, or -1 with an exception set). ``writes`` (only
 * with ``fallback`` None: the express lane's run in the loop turn's group) lets writes run here
 * too, with ``journal`` the owner's: the run still stops at the first command Python must run,
 * which the caller runs itself. */
static int
run_into(PyObject *const *args, int writes, Ran *ran)
{
    Run r = {0};
    r.ks = args[0];
    r.journal = args[1];
    PyObject *argvs = args[2];
    Py_ssize_t at = PyLong_AsSsize_t(args[3]);
    r.bucket = args[4];
    r.protocol = (int)PyLong_AsLong(args[5]);
    r.now_ms = as_long_long(args[6]);
    long long room = as_long_long(args[7]);
    r.max_reply = PyLong_AsSsize_t(args[8]);
    PyObject *fallback = args[10];
    Counts counts = {args[9], NULL, 0};
    int stop_at_python = fallback == Py_None;
    r.reads_only = stop_at_python && !writes;
    if (PyErr_Occurred())
        return -1;
    if (!PyList_CheckExact(argvs) || !PyBytes_CheckExact(r.bucket) || !PyDict_CheckExact(counts.calls)) {
        PyErr_SetString(PyExc_TypeError, "run() needs a list of argvs, a bytes bucket and a dict");
        return -1;
    }
    /* As ``execute`` does per command: the clock, and an open group closed first. */
    PyObject *now = PyLong_CheckExact(args[6]) ? Py_NewRef(args[6])
                                               : PyLong_FromLongLong(r.now_ms);
    if (now == NULL || slot_attr_set(&s_clock_ms, r.ks, now) < 0) {
        Py_XDECREF(now);
        return -1;
    }
    Py_DECREF(now);
    /* A group left open before the run would take in the first command's ops: Python's
     * way, so that command is Python's. */
    int open = truthy_attr(r.journal, &s_open);
    if (open < 0)
        return -1;
    Out o = {0};
    if (run_load(&r) < 0)
        goto error;
    for (; at < PyList_GET_SIZE(argvs) && room >= 0; at++) {
        PyObject *argv = PyList_GET_ITEM(argvs, at);
        Py_ssize_t before = o.len;
        int done = open ? FALLBACK : dispatch(&r, argv, &o);
        open = 0;
        if (done == FAILED)
            goto error;
        if (done == DONE) {
            if (count_call(&counts, PyList_GET_ITEM(argv, 0)) < 0)
                goto error;
        }
        else if (stop_at_python) {
            break; /* the caller runs the rest the usual way */
        }
        else {
            if (run_settle_keys(&r) < 0 || counts_flush(&counts) < 0)
                goto error; /* Python counts its own, in order with the run's */
            PyObject *reply = PyObject_CallOneArg(fallback, argv);
            if (reply == NULL)
                goto error;
            int bad = !PyBytes_CheckExact(reply);
            if (bad)
                PyErr_SetString(PyExc_TypeError, "fallback must return bytes");
            else if (out_put(&o, PyBytes_AS_STRING(reply), PyBytes_GET_SIZE(reply)) < 0)
                bad = 1;
            Py_DECREF(reply);
            if (bad || run_load(&r) < 0)
                goto error;
        }
        room -= o.len - before;
    }
    if (run_settle_keys(&r) < 0 || counts_flush(&counts) < 0)
        goto error;
    run_release(&r);
    ran->replies = PyBytes_FromStringAndSize(o.data ? o.data : "", o.len);
    PyMem_Free(o.data);
    if (ran->replies == NULL)
        return -1;
    ran->next = at;
    ran->room = room;
    return 0;

error:
    {
        /* What ran is counted; the run's own error is the one raised. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (counts_flush(&counts) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    run_fail(&r);
    PyMem_Free(o.data);
    return -1;
}

/* ``run_into``'s result as ``run`` returns it: (next, replies, room). */
static PyObject *
run_with(PyObject *const *args, int writes)
{
    Ran ran;
    if (run_into(args, writes, &ran) < 0)
        return NULL;
    PyObject *stop = PyLong_FromSsize_t(ran.next), *left = PyLong_FromLongLong(ran.room);
    PyObject *result = stop && left ? PyTuple_Pack(3, stop, ran.replies, left) : NULL;
    Py_XDECREF(stop);
    Py_XDECREF(left);
    Py_DECREF(ran.replies);
    return result;
}

/* -- the line protocol's batch -------------------------------------------------------------
 *
 *     run_line(ks, journal, requests, now_ms, room, fallback)
 *         -> (replies, room, (gets, get_hits, sets, dels, del_hits))
 *
 * The C twin of ``StoreState.execute_all_python`` (see ``_state.py``): one connection's batch
 * of decoded line requests (``Get``, ``Set``, ``Delete``, ``Bulk`` named tuples, and anything
 * else) run in order while ``room`` is not negative, a run of consecutive SETs whole (its
 * replies are three bytes each: it is never cut). A request runs here in its plain case,
 * decided before anything changes:
 *
 * - GET: the key is missing, or holds bytes without a deadline that ``VALUE`` carries as they
 *   are (at most the protocol's value size, ASCII, no LF);
 * - SET: the bucket exists, the key is missing or holds bytes without a deadline, nobody
 *   WATCHes a key, and no bucket keeps a SCAN index or sorted list if the key is new;
 * - DEL: the key is missing, or holds bytes without a deadline, nobody WATCHes, no index, and
 *   it is not the bucket's last key (dropping a bucket is the keyspace's, with its tables);
 * - BULK: nobody WATCHes, no index anywhere, every row plain (``bulk_plain``): one group of
 *   ``Put`` / ``Remove`` ops, noted as ``Keyspace.write_group`` notes it (SET rows only: one
 *   ``PutsUndo``, its fast path; with DEL rows: a ``KeyUndo`` per row that changed a key).
 *
 * Everything else goes to ``fallback(request)``, ``StoreState.execute``, which counts it
 * itself. The caller runs this only with an empty open group (``journal._open``): every line
 * request closes its own, so none is open between them. The counts returned are those of the
 * requests run here, for the caller to add to its statistics.
 */

static PyObject *GetReq, *SetReq, *DeleteReq, *BulkReq, *PutsUndo;
static Py_ssize_t line_max_value;
static PyObject *line_ok, *line_nil; /* b"OK\n", b"NIL\n" */

enum { C_GETS, C_GET_HITS, C_SETS, C_DELS, C_DEL_HITS, C_COUNTS };

typedef struct {
    Run run;                /* ks, journal, buckets, records, undo, watched, keys_delta */
    int any_index;          /* some bucket keeps a SCAN index or a sorted list */
    long long counts[C_COUNTS];
} LineRun;

/* What the batch needs of the keyspace and journal (again after Python ran). */
static int
line_load(LineRun *l)
{
    Run *r = &l->run;
    run_release(r);
    if (run_load(r) < 0 || load_journal(r) < 0)
        return -1;
    int index = truthy_attr(r->ks, &s_indexes);
    int sorted = truthy_attr(r->ks, &s_sorted);
    if (index < 0 || sorted < 0)
        return -1;
    l->any_index = index || sorted;
    return 0;
}

/* The bytes items of a request tuple of ``n`` fields, or 0 if it is not of that shape. */
static int
fields_of(PyObject *request, Py_ssize_t n, PyObject **items)
{
    if (!PyTuple_Check(request) || PyTuple_GET_SIZE(request) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        items[i] = PyTuple_GET_ITEM(request, i);
        if (!PyBytes_CheckExact(items[i]))
            return 0;
    }
    return 1;
}

/* The bucket's dict (borrowed) or NULL (no error set: no such bucket). */
static PyObject *
line_bucket(LineRun *l, PyObject *name)
{
    PyObject *found = PyDict_GetItemWithError(l->run.buckets, name);
    if (found != NULL && !PyDict_CheckExact(found)) {
        PyErr_SetString(PyExc_TypeError, "bucket of an unexpected shape");
        return NULL;
    }
    return found;
}

/* Whether ``VALUE <value>`` carries ``value`` without Python deciding (``can_carry``'s ASCII
 * case; a non-ASCII value is Python's to decode). */
static int
carried_plainly(PyObject *value)
{
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(value);
    if (n > line_max_value)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] >= 0x80 || s[i] == '\n')
            return 0;
    }
    return 1;
}

enum { FOUND = 2 };

/* The first steps of GET and DEL (``counter``): the request's (bucket, key) fields in ``f``,
 * its bucket in *found and the value there in *value (borrowed) if FOUND; a missing key is
 * answered NIL here (DONE); FALLBACK if the request is not of that shape; FAILED. */
static int
line_keyed(LineRun *l, PyObject *request, int counter, PyObject **f, PyObject **found,
           PyObject **value, PyObject **reply)
{
    if (!fields_of(request, 2, f))
        return FALLBACK;
    *found = line_bucket(l, f[0]);
    *value = *found ? PyDict_GetItemWithError(*found, f[1]) : NULL;
    if (PyErr_Occurred())
        return FAILED;
    if (*value != NULL)
        return FOUND;
    l->counts[counter]++;
    *reply = new_ref(line_nil);
    return DONE;
}

/* GET: *reply set (new reference) if run here. */
static int
line_get(LineRun *l, PyObject *request, PyObject **reply)
{
    PyObject *f[2], *found, *value;
    int kind = line_keyed(l, request, C_GETS, f, &found, &value, reply);
    if (kind != FOUND)
        return kind;
    if (!PyBytes_CheckExact(value) || !carried_plainly(value))
        return FALLBACK; /* a deadline, a container, or a value Python must judge */
    Py_ssize_t n = PyBytes_GET_SIZE(value);
    *reply = PyBytes_FromStringAndSize(NULL, n + 7);
    if (*reply == NULL)
        return FAILED;
    char *out = PyBytes_AS_STRING(*reply);
    memcpy(out, "VALUE ", 6);
    memcpy(out + 6, PyBytes_AS_STRING(value), n);
    out[n + 6] = '\n';
    l->counts[C_GETS]++;
    l->counts[C_GET_HITS]++;
    return DONE;
}

/* Whether a put of ``key`` into ``found`` is SET's plain case; -1 on error. */
static int
line_puttable(LineRun *l, PyObject *found, PyObject *key)
{
    PyObject *old = PyDict_GetItemWithError(found, key);
    if (old == NULL)
        return PyErr_Occurred() ? -1 : !l->any_index;
    return PyBytes_CheckExact(old);
}

/* found[key] = value, its old value (or None) a new reference in *old (NULL if it failed);
 * the count kept. */
static int
line_store(LineRun *l, PyObject *found, PyObject *key, PyObject *value, PyObject **old)
{
    PyObject *was = PyDict_GetItemWithError(found, key);
    *old = NULL;
    if (was == NULL && PyErr_Occurred())
        return -1;
    *old = new_ref(was ? was : Py_None);
    if (PyDict_SetItem(found, key, value) < 0) {
        Py_CLEAR(*old);
        return -1;
    }
    l->run.keys_delta += was == NULL;
    return 0;
}

/* records.append(ops): a group of one op (stolen). */
static int
note_group_of(Run *r, PyObject *op)
{
    if (op == NULL)
        return -1;
    PyObject *group = PyList_New(1);
    if (group == NULL) {
        Py_DECREF(op);
        return -1;
    }
    PyList_SET_ITEM(group, 0, op);
    int rc = PyList_Append(r->records, group);
    Py_DECREF(group);
    return rc;
}

static int
line_set(LineRun *l, PyObject *request, PyObject **reply)
{
    Run *r = &l->run;
    PyObject *f[3];
    if (!fields_of(request, 3, f) || r->watched)
        return FALLBACK;
    PyObject *found = line_bucket(l, f[0]);
    if (found == NULL)
        return PyErr_Occurred() ? FAILED : FALLBACK; /* a new bucket: the keyspace's */
    int plain = line_puttable(l, found, f[1]);
    if (plain <= 0)
        return plain < 0 ? FAILED : FALLBACK;
    PyObject *old;
    if (line_store(l, found, f[1], f[2], &old) < 0)
        return FAILED;
    r->bucket = f[0];
    int rc = note_undo(r, f[1], old == Py_None ? NULL : old);
    Py_DECREF(old);
    if (rc < 0)
        return FAILED;
    PyObject *items[4] = {new_ref(f[0]), new_ref(f[1]), new_ref(f[2]), new_ref(Py_None)};
    if (note_group_of(r, named(PutOp, 4, items)) < 0)
        return FAILED;
    l->counts[C_SETS]++;
    *reply = new_ref(line_ok);
    return DONE;
}

static int
line_del(LineRun *l, PyObject *request, PyObject **reply)
{
    Run *r = &l->run;
    PyObject *f[2], *found, *old;
    int kind = line_keyed(l, request, C_DELS, f, &found, &old, reply);
    if (kind != FOUND)
        return kind;
    if (!PyBytes_CheckExact(old) || r->watched || l->any_index || PyDict_GET_SIZE(found) < 2)
        return FALLBACK;
    r->bucket = f[0];
    if (note_undo(r, f[1], old) < 0) /* it holds the old value from here on */
        return FAILED;
    PyObject *items[2] = {new_ref(f[0]), new_ref(f[1])};
    if (note_group_of(r, named(RemoveOp, 2, items)) < 0 || PyDict_DelItem(found, f[1]) < 0)
        return FAILED;
    r->keys_delta--;
    l->counts[C_DELS]++;
    l->counts[C_DEL_HITS]++;
    *reply = new_ref(line_ok);
    return DONE;
}

/* Whether every row of a frame (``rows``, n of them) is plain: a SET row's bucket exists and
 * its key is missing or holds bytes without a deadline; a DEL row's key is missing or holds
 * such bytes, and its bucket has more keys than the frame has rows (so no row empties it:
 * dropping a bucket is the keyspace's). *dels: how many DEL rows. 1, 0 (not plain), -1. */
static int
bulk_plain(LineRun *l, PyObject *rows, Py_ssize_t *dels)
{
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *f[3], *found = NULL, *name = NULL;
    *dels = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        int put = fields_of(row, 3, f);
        if (!put && !fields_of(row, 2, f))
            return 0;
        *dels += !put;
        if (f[0] != name) {
            name = f[0];
            found = line_bucket(l, name);
            if (found == NULL && PyErr_Occurred())
                return -1;
        }
        if (found == NULL) {
            if (put)
                return 0; /* a new bucket: the keyspace's */
            continue;     /* a DEL row of no bucket: nothing to do */
        }
        PyObject *old = PyDict_GetItemWithError(found, f[1]);
        if (old == NULL && PyErr_Occurred())
            return -1;
        if ((old != NULL && !PyBytes_CheckExact(old)) || (!put && PyDict_GET_SIZE(found) <= n))
            return 0;
    }
    return 1;
}

/* A frame of SET rows only: ``Keyspace.write_group``'s fast path (one ``PutsUndo``). */
static int
bulk_puts(LineRun *l, PyObject *rows, PyObject *group)
{
    Run *r = &l->run;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *f[3], *found = NULL, *name = NULL;
    PyObject *olds = PyList_New(n);
    if (olds == NULL)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        fields_of(PyList_GET_ITEM(rows, i), 3, f);
        if (f[0] != name) {
            name = f[0];
            found = line_bucket(l, name); /* there: checked, and puts drop no bucket */
            if (found == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "a bucket went away in a frame");
                rc = -1;
                break;
            }
        }
        PyObject *old;
        rc = line_store(l, found, f[1], f[2], &old);
        if (rc < 0) {
            Py_XDECREF(old);
            break;
        }
        PyList_SET_ITEM(olds, i, old);
        r->bucket = f[0];
        rc = note_put(r, group, f[1], f[2]);
    }
    if (rc == 0 && n > 0) {
        PyObject *items[3] = {new_ref(rows), PyLong_FromLong(0), new_ref(olds)};
        PyObject *entry = named(PutsUndo, 3, items);
        rc = entry == NULL ? -1 : PyList_Append(r->undo, entry);
        Py_XDECREF(entry);
    }
    Py_DECREF(olds);
    return rc;
}

/* A frame with DEL rows: ``write_group``'s general path (a ``KeyUndo`` per row that changed
 * something); how many DEL rows found their key, or -1. */
static Py_ssize_t
bulk_mixed(LineRun *l, PyObject *rows, PyObject *group)
{
    Run *r = &l->run;
    Py_ssize_t found_keys = 0;
    PyObject *f[3];
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        int put = fields_of(row, 3, f);
        if (!put)
            fields_of(row, 2, f);
        PyObject *found = line_bucket(l, f[0]);
        PyObject *old = found ? PyDict_GetItemWithError(found, f[1]) : NULL;
        if (PyErr_Occurred())
            return -1;
        if (!put && old == NULL)
            continue;
        r->bucket = f[0];
        if (note_undo(r, f[1], old) < 0)
            return -1;
        if (put) {
            if (found == NULL) {
                PyErr_SetString(PyExc_RuntimeError, "a bucket went away in a frame");
                return -1;
            }
            if (note_put(r, group, f[1], f[2]) < 0 || PyDict_SetItem(found, f[1], f[2]) < 0)
                return -1;
            r->keys_delta += old == NULL;
            continue;
        }
        if (note_remove(r, group, f[1]) < 0 || PyDict_DelItem(found, f[1]) < 0)
            return -1;
        r->keys_delta--;
        found_keys++;
    }
    return found_keys;
}

/* BULK: a frame whose rows are all plain (``bulk_plain``), as one group, ``OK <n>``. */
static int
line_bulk(LineRun *l, PyObject *request, PyObject **reply)
{
    Run *r = &l->run;
    if (!PyTuple_Check(request) || PyTuple_GET_SIZE(request) != 1 || r->watched || l->any_index)
        return FALLBACK;
    PyObject *rows = PyTuple_GET_ITEM(request, 0);
    if (!PyList_CheckExact(rows))
        return FALLBACK;
    Py_ssize_t n = PyList_GET_SIZE(rows), dels;
    int plain = bulk_plain(l, rows, &dels);
    if (plain <= 0)
        return plain < 0 ? FAILED : FALLBACK;
    PyObject *group = PyList_New(0);
    if (group == NULL)
        return FAILED;
    Py_ssize_t found_keys = dels ? bulk_mixed(l, rows, group) : bulk_puts(l, rows, group);
    int rc = found_keys < 0 ? -1 : close_group(r, group);
    Py_DECREF(group);
    if (rc < 0)
        return FAILED;
    l->counts[C_SETS] += n - dels;
    l->counts[C_DELS] += dels;
    l->counts[C_DEL_HITS] += found_keys;
    *reply = PyBytes_FromFormat("OK %zd\n", n);
    return *reply == NULL ? FAILED : DONE;
}

/* One request other than a SET: DONE with *reply, FALLBACK (nothing changed) or FAILED. */
static int
line_dispatch(LineRun *l, PyObject *request, PyObject **reply)
{
    PyTypeObject *type = Py_TYPE(request);
    if ((PyObject *)type == GetReq)
        return line_get(l, request, reply);
    if ((PyObject *)type == DeleteReq)
        return line_del(l, request, reply);
    if ((PyObject *)type == BulkReq)
        return line_bulk(l, request, reply);
    return FALLBACK;
}

/* ``fallback(request)``: its reply (bytes, new reference) with the batch's view reloaded. */
static PyObject *
line_fallback(LineRun *l, PyObject *fallback, PyObject *request)
{
    if (run_settle_keys(&l->run) < 0)
        return NULL;
    PyObject *reply = PyObject_CallOneArg(fallback, request);
    if (reply != NULL && !PyBytes_CheckExact(reply)) {
        Py_CLEAR(reply);
        PyErr_SetString(PyExc_TypeError, "fallback must return bytes");
    }
    if (reply != NULL && line_load(l) < 0)
        Py_CLEAR(reply);
    return reply;
}

static PyObject *
run_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "run_line() takes 6 arguments");
        return NULL;
    }
    if (GetReq == NULL || KeyUndo == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "run_line() before bind() and bind_line()");
        return NULL;
    }
    LineRun l = {0};
    Run *r = &l.run;
    r->ks = args[0];
    r->journal = args[1];
    PyObject *requests = args[2], *fallback = args[5];
    r->now_ms = as_long_long(args[3]);
    long long room = as_long_long(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(requests)) {
        PyErr_SetString(PyExc_TypeError, "run_line() needs a list of requests");
        return NULL;
    }
    PyObject *replies = PyList_New(0);
    if (replies == NULL || line_load(&l) < 0)
        goto error;
    Py_ssize_t at = 0;
    while (at < PyList_GET_SIZE(requests) && room >= 0) {
        PyObject *request = PyList_GET_ITEM(requests, at);
        PyObject *reply = NULL;
        if ((PyObject *)Py_TYPE(request) == SetReq) {
            /* A run of SETs is run whole, as the Python twin's ``put_commands`` does. */
            Py_ssize_t end = at;
            while (end < PyList_GET_SIZE(requests)
                   && (PyObject *)Py_TYPE(PyList_GET_ITEM(requests, end)) == SetReq) {
                request = PyList_GET_ITEM(requests, end);
                int done = line_set(&l, request, &reply);
                if (done == FAILED)
                    goto error;
                if (done == FALLBACK) {
                    reply = line_fallback(&l, fallback, request); /* execute answers OK */
                    if (reply == NULL)
                        goto error;
                }
                int rc = PyList_Append(replies, reply);
                Py_DECREF(reply);
                if (rc < 0)
                    goto error;
                end++;
            }
            room -= (long long)PyBytes_GET_SIZE(line_ok) * (end - at);
            at = end;
            continue;
        }
        int done = line_dispatch(&l, request, &reply);
        if (done == FAILED)
            goto error;
        if (done == FALLBACK) {
            reply = line_fallback(&l, fallback, request);
            if (reply == NULL)
                goto error;
        }
        room -= PyBytes_GET_SIZE(reply);
        int rc = PyList_Append(replies, reply);
        Py_DECREF(reply);
        if (rc < 0)
            goto error;
        at++;
    }
    if (run_settle_keys(r) < 0)
        goto error;
    run_release(r);
    return Py_BuildValue("(NL(LLLLL))", replies, room, l.counts[C_GETS], l.counts[C_GET_HITS],
                         l.counts[C_SETS], l.counts[C_DELS], l.counts[C_DEL_HITS]);

error:
    run_fail(r);
    Py_XDECREF(replies);
    return NULL;
}

static PyObject *
bind_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_line(Get, Set, Delete, Bulk, PutsUndo, max_value, OK, NIL)");
        return NULL;
    }
    for (int i = 0; i < 5; i++) {
        if (!PyType_Check(args[i])
            || !PyType_IsSubtype((PyTypeObject *)args[i], &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "bind_line() takes five named tuple types");
            return NULL;
        }
    }
    Py_ssize_t max_value = PyLong_AsSsize_t(args[5]);
    if (max_value == -1 && PyErr_Occurred())
        return NULL;
    if (!PyBytes_CheckExact(args[6]) || !PyBytes_CheckExact(args[7])) {
        PyErr_SetString(PyExc_TypeError, "bind_line() takes the OK and NIL replies as bytes");
        return NULL;
    }
    PyObject **slots[7] = {&GetReq, &SetReq, &DeleteReq, &BulkReq, &PutsUndo, &line_ok,
                           &line_nil};
    for (int i = 0; i < 7; i++) {
        PyObject *value = args[i < 5 ? i : i + 1];
        Py_INCREF(value);
        Py_XSETREF(*slots[i], value);
    }
    line_max_value = max_value;
    Py_RETURN_NONE;
}

/* Where the run of plain commands from ``commands[end]`` ends (-1 on error): the loop of
 * ``plain_end`` below. */
static Py_ssize_t
plain_end_from(PyObject *commands, Py_ssize_t end, PyObject *arities)
{
    /* A pipeline repeats one name: the same bytes as the command before take its arity
     * without hashing a new name object for the dict. */
    PyObject *last = NULL;
    long arity = 0;
    for (; end < PyList_GET_SIZE(commands); end++) {
        PyObject *argv = PyList_GET_ITEM(commands, end);
        if (!PyList_CheckExact(argv) || PyList_GET_SIZE(argv) == 0)
            break;
        PyObject *name = PyList_GET_ITEM(argv, 0);
        if (last == NULL || !same_bytes(name, last)) {
            PyObject *found = PyDict_GetItemWithError(arities, name);
            if (found == NULL) {
                if (PyErr_Occurred())
                    return -1;
                break;
            }
            arity = PyLong_AsLong(found);
            if (arity == -1 && PyErr_Occurred())
                return -1;
            last = name;
        }
        Py_ssize_t argc = PyList_GET_SIZE(argv);
        if (arity > 0 ? argc != arity : argc < -arity)
            break;
    }
    return end;
}

/* plain_end(commands, start, arities) -> end: see ``_plainrun.plain_end_python``. */
static PyObject *
plain_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "plain_end(list, start, dict)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t end = plain_end_from(args[0], start < 0 ? 0 : start, args[2]);
    return end < 0 ? NULL : PyLong_FromSsize_t(end);
}

static PyObject *
run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "run() takes 11 arguments");
        return NULL;
    }
    return run_with(args, 0);
}

/* wall_clock_ms() -> the owner's default clock, ``wall_clock_ms_python`` in C: the express lane
 * asks the clock once per read it serves, and a Python function is a frame there. */
static PyObject *
wall_clock_ms(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
}

/* express(scan, data, max_count, max_bulk, (limit, arities, reads, ks, journal, room_of,
 *         max_reply, calls, bucket, protocol, clock, inline, turn))
 *     -> None | (commands, end, served, replies, turned, turn_replies)
 *
 * The express lane of a RESP connection in one call, the twin of
 * ``_plainrun.express_python``: ``scan`` (the decoder's ``scan_raw``) decodes the whole read
 * ``data``; None if it is not entirely complete, plainly valid commands, at most ``limit``.
 * ``end`` is where their plain run ends (``plain_end``). When every command is plain and
 * ``clock`` is not None (the owner is idle), ``room_of()`` is asked for the output room and,
 * if it is not negative:
 *
 * - with ``inline`` true and the first command one of ``reads``, the reads at the head are
 *   served as an inline ``run`` (no fallback, ``journal`` the scratch one) at ``clock()``
 *   would serve them: ``served`` of them, their replies in ``replies``;
 * - then, with ``turn`` not None (the owner's journal: the loop turn's group may take them),
 *   the commands from there run as a ``run`` with writes (``run_with``) and ``turn`` for
 *   journal, up to the first that Python must run: to ``turned``, their replies in
 *   ``turn_replies``, which the caller holds until the turn is logged.
 *
 * ``turned`` is ``served`` when nothing ran in the turn. A call that runs nothing asks
 * neither ``room_of`` nor ``clock``. */
static PyObject *
express(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyBytes_CheckExact(args[1]) || !PyTuple_CheckExact(args[4])
        || PyTuple_GET_SIZE(args[4]) != 13) {
        PyErr_SetString(PyExc_TypeError, "express(scan, bytes, max_count, max_bulk, 13-tuple)");
        return NULL;
    }
    PyObject *data = args[1], *lane = args[4];
    PyObject *arities = PyTuple_GET_ITEM(lane, 1), *reads = PyTuple_GET_ITEM(lane, 2);
    PyObject *clock = PyTuple_GET_ITEM(lane, 10), *turn = PyTuple_GET_ITEM(lane, 12);
    if (!PyDict_CheckExact(arities) || !PyFrozenSet_CheckExact(reads)) {
        PyErr_SetString(PyExc_TypeError, "express() needs a dict of arities and a frozenset");
        return NULL;
    }
    int inline_reads = PyObject_IsTrue(PyTuple_GET_ITEM(lane, 11));
    if (inline_reads < 0)
        return NULL;
    PyObject *commands = PyList_New(0);
    if (commands == NULL)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *now = NULL, *room = NULL, *next_obj = NULL;
    PyObject *next_room_obj = NULL;
    Ran ran = {0, NULL, 0}, turned = {0, NULL, 0};
    PyObject *scan_args[6] = {data, zero, commands, PyTuple_GET_ITEM(lane, 0), args[2], args[3]};
    PyObject *taken = zero == NULL ? NULL : PyObject_Vectorcall(args[0], scan_args, 6, NULL);
    Py_ssize_t at = taken == NULL ? -1 : PyLong_AsSsize_t(taken);
    Py_XDECREF(taken);
    if (at == -1 && PyErr_Occurred())
        goto error;
    Py_ssize_t count = PyList_GET_SIZE(commands);
    if (at != PyBytes_GET_SIZE(data) || count == 0) {
        Py_DECREF(zero);
        Py_DECREF(commands);
        Py_RETURN_NONE;
    }
    Py_ssize_t end = plain_end_from(commands, 0, arities);
    if (end < 0)
        goto error;
    if (end == count && clock != Py_None) {
        int read = 0;
        if (inline_reads) {
            /* plain_end_from saw a list with a name first */
            PyObject *name = PyList_GET_ITEM(PyList_GET_ITEM(commands, 0), 0);
            read = PySet_Contains(reads, name);
            if (read < 0)
                goto error;
        }
        if (read || turn != Py_None) {
            room = PyObject_CallNoArgs(PyTuple_GET_ITEM(lane, 5));
            long long left = room == NULL ? -1 : as_long_long(room);
            if (left == -1 && PyErr_Occurred())
                goto error;
            if (left >= 0) {
                /* The owner's default clock, this module's: called as C. */
                now = PyCFunction_Check(clock)
                              && PyCFunction_GET_FUNCTION(clock) == (PyCFunction)wall_clock_ms
                          ? wall_clock_ms(NULL, NULL)
                          : PyObject_CallNoArgs(clock);
                if (now == NULL)
                    goto error;
            }
            PyObject *next = zero, *next_room = room;
            if (left >= 0 && read) {
                PyObject *run_args[11] = {
                    PyTuple_GET_ITEM(lane, 3), PyTuple_GET_ITEM(lane, 4), commands, zero,
                    PyTuple_GET_ITEM(lane, 8), PyTuple_GET_ITEM(lane, 9), now, room,
                    PyTuple_GET_ITEM(lane, 6), PyTuple_GET_ITEM(lane, 7), Py_None,
                };
                if (run_into(run_args, 0, &ran) < 0)
                    goto error;
                left = ran.room;
                if (left >= 0 && turn != Py_None && ran.next < count) {
                    next = next_obj = PyLong_FromSsize_t(ran.next);
                    next_room = next_room_obj = PyLong_FromLongLong(ran.room);
                    if (next_obj == NULL || next_room_obj == NULL)
                        goto error;
                }
            }
            if (left >= 0 && turn != Py_None && (ran.replies == NULL || ran.next < count)) {
                PyObject *run_args[11] = {
                    PyTuple_GET_ITEM(lane, 3), turn, commands, next,
                    PyTuple_GET_ITEM(lane, 8), PyTuple_GET_ITEM(lane, 9), now, next_room,
                    PyTuple_GET_ITEM(lane, 6), PyTuple_GET_ITEM(lane, 7), Py_None,
                };
                if (run_into(run_args, 1, &turned) < 0)
                    goto error;
            }
        }
    }
    PyObject *end_obj = PyLong_FromSsize_t(end);
    PyObject *no_replies = PyBytes_FromStringAndSize("", 0);
    PyObject *served = ran.replies ? PyLong_FromSsize_t(ran.next) : Py_NewRef(zero);
    PyObject *turned_next = turned.replies ? PyLong_FromSsize_t(turned.next) : Py_XNewRef(served);
    PyObject *result = NULL;
    if (end_obj != NULL && no_replies != NULL && served != NULL && turned_next != NULL) {
        result = PyTuple_Pack(6, commands, end_obj, served,
                              ran.replies ? ran.replies : no_replies, turned_next,
                              turned.replies ? turned.replies : no_replies);
    }
    Py_XDECREF(end_obj);
    Py_XDECREF(no_replies);
    Py_XDECREF(served);
    Py_XDECREF(turned_next);
    Py_XDECREF(turned.replies);
    Py_XDECREF(ran.replies);
    Py_XDECREF(next_obj);
    Py_XDECREF(next_room_obj);
    Py_XDECREF(now);
    Py_XDECREF(room);
    Py_DECREF(zero);
    Py_DECREF(commands);
    return result;

error:
    Py_XDECREF(turned.replies);
    Py_XDECREF(ran.replies);
    Py_XDECREF(next_obj);
    Py_XDECREF(next_room_obj);
    Py_XDECREF(now);
    Py_XDECREF(room);
    Py_XDECREF(zero);
    Py_DECREF(commands);
    return NULL;
}

/* answer_turn(turn): ``for sink, _, _, replies in turn: sink.turn_answered(replies)``, the
 * twin of ``_plainrun.answer_turn_python`` (an entry unpacked as Python unpacks it). */
static PyObject *
answer_turn(PyObject *module, PyObject *turn)
{
    if (!PyList_CheckExact(turn)) {
        PyErr_SetString(PyExc_TypeError, "answer_turn() takes a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(turn); i++) {  /* as long as it is now */
        PyObject *item = PyList_GET_ITEM(turn, i);
        if (Py_TYPE(item)->tp_iter == NULL && !PySequence_Check(item)) {
            PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object",
                         Py_TYPE(item)->tp_name);
            return NULL;
        }
        PyObject *entry = PySequence_Fast(item, "cannot unpack an entry");
        if (entry == NULL)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(entry);
        if (n != 4) {
            if (n > 4)
                PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 4)");
            else
                PyErr_Format(PyExc_ValueError,
                             "not enough values to unpack (expected 4, got %zd)", n);
            Py_DECREF(entry);
            return NULL;
        }
        PyObject **items = PySequence_Fast_ITEMS(entry);
        PyObject *args[2] = {items[0], items[3]};
        PyObject *r = PyObject_VectorcallMethod(s_turn_answered, args,
                                                2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(entry);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind(KeyUndo, Put, Remove, Expiring)");
        return NULL;
    }
    PyObject **slots[4] = {&KeyUndo, &PutOp, &RemoveOp, &Expiring};
    for (int i = 0; i < 4; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "bind() takes four types");
            return NULL;
        }
        if (i < 3 && !PyType_IsSubtype((PyTypeObject *)args[i], &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "the journal's types must be named tuples");
            return NULL;
        }
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    Py_RETURN_NONE;
}


static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(ks, journal, argvs, start, bucket, protocol, now_ms, room, max_reply, calls, "
     "fallback) -> (next, replies, room)"},
    {"plain_end", (PyCFunction)(void (*)(void))plain_end, METH_FASTCALL,
     "plain_end(commands, start, arities) -> where the run of plain commands ends"},
    {"answer_turn", (PyCFunction)answer_turn, METH_O,
     "answer_turn(turn): each (sink, executor, request, replies) of the loop turn's group "
     "handed its replies, sink.turn_answered(replies), in order."},
    {"express", (PyCFunction)(void (*)(void))express, METH_FASTCALL,
     "express(scan, data, max_count, max_bulk, (limit, arities, reads, ks, journal, room_of, "
     "max_reply, calls, bucket, protocol, clock, inline, turn)) -> None | (commands, end, "
     "served, replies, turned, turn_replies)"},
    {"wall_clock_ms", wall_clock_ms, METH_NOARGS,
     "wall_clock_ms() -> milliseconds since the Unix epoch (CLOCK_REALTIME)"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(KeyUndo, Put, Remove, Expiring): the types run() builds and recognises"},
    {"run_line", (PyCFunction)(void (*)(void))run_line, METH_FASTCALL,
     "run_line(ks, journal, requests, now_ms, room, fallback) -> (replies, room, counts)"},
    {"bind_line", (PyCFunction)(void (*)(void))bind_line, METH_FASTCALL,
     "bind_line(Get, Set, Delete, Bulk, PutsUndo, max_value, OK, NIL): what run_line() knows"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cplain", "A run of plain Redis commands in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__cplain(void)
{
    struct {
        SlotAttr *slot;
        const char *text;
    } names[] = {
        {&s_buckets, "_buckets"}, {&s_watched, "_watched"}, {&s_indexes, "_indexes"},
        {&s_sorted, "_sorted"},   {&s_keys, "_keys"},       {&s_max_value, "max_value_bytes"},
        {&s_clock_ms, "_clock_ms"}, {&s_records, "records"}, {&s_undo, "undo"},
        {&s_open, "_open"},       {&s_value, "value"},      {&s_tick, "_wheel_tick"},
    };
    one = PyLong_FromLong(1);
    s_turn_answered = PyUnicode_InternFromString("turn_answered");
    if (one == NULL || s_turn_answered == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        names[i].slot->name = PyUnicode_InternFromString(names[i].text);
        if (names[i].slot->name == NULL)
            return NULL;
    }
    return PyModule_Create(&module_def);
}
