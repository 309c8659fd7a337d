/* minidb.runtime._cwheel: the timer wheel's hot path in C (optional accelerator).
 *
 * This module owns a C implementation of ``minidb.runtime._wheel.TimerWheel`` with the same
 * API and the same behaviour (theory of operation: that module's docstring), plus
 * ``schedule()``, which does the whole of ``call_at`` after the loop's own checks: it makes the
 * ``WheelTimerHandle``, fills its slots and files it, with no bytecode in between; and
 * ``reschedule()``, the body of ``loop.reschedule`` (an idle timeout pushed out). The pure
 * module stays the reference and the fallback (``_accel.py`` picks one); the tests run both.
 *
 * Representation. Slots and the pending set are dicts keyed by entry, exactly as in the pure
 * wheel, so FIFO order, O(1) unlink and "a cancelled entry leaves nothing behind" carry over
 * unchanged. Entries keep their place in ``_wheel_tick`` (the int the caller gave) and
 * ``_wheel_where`` (a slot index, PENDING or UNFILED). When an entry's class stores those in
 * ``__slots__`` and does not override attribute access, they are read and written at their
 * slot offsets (looked up once per class and re-checked when the class changes); any other
 * entry goes through ordinary attribute access.
 *
 * Garbage collection. A handle made by ``schedule()`` (and the context copied for it) is
 * untracked by the cyclic GC while it sits in the wheel, and tracked again the moment it leaves
 * (fired, cancelled, cleared, or the wheel dropped). While filed it is reachable from the wheel,
 * so it cannot be garbage, and the collector gains nothing by walking it; walking a million of
 * them on every full collection is what made scheduling at 1M timers cost as much as stock
 * asyncio's heap. The one visible consequence: a loop abandoned without ``close()`` while it
 * still has armed timers is not collected (its handles keep it alive); ``close()`` or
 * cancelling the timers releases it. Only the accelerated path does this.
 *
 * Tick range. The wheel's position (``elapsed``, ``poll(now)``) is a C int64 and must stay at
 * or below MAX_ELAPSED (2**61 ticks, 73 million years of 1 ms ticks); beyond it ``poll`` and
 * the constructor raise OverflowError. Entry deadlines may be any int: a deadline at or past
 * HUGE_TICK (2**62) can never come due below MAX_ELAPSED, so inside the wheel it is stood in
 * for by HUGE_TICK plus its low 36 bits, which files it in the same top-level slot as the pure
 * wheel does; a deadline below -HUGE_TICK is simply due. Ordering among due entries always
 * compares the real ints (the pending set is sorted with the entries' own ``_wheel_tick``).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>

#include "../_cslots.h"

#define NUM_LEVELS 6
#define SLOT_BITS 6
#define SLOTS 64
#define SLOT_MASK 63
#define NSLOTS (NUM_LEVELS * SLOTS)
#define TOP (NUM_LEVELS - 1)
#define SPAN_BITS (NUM_LEVELS * SLOT_BITS)          /* one lap of the top level: 2**36 ticks */
#define PENDING (-1)
#define UNFILED (-2)
#define HUGE_TICK ((int64_t)1 << 62)                 /* stand-in base for deadlines >= 2**62 */
#define MAX_ELAPSED ((int64_t)1 << 61)               /* the wheel's position never passes it */
#define TICKS_PER_SECOND 1000                        /* must equal _loop.TICKS_PER_SECOND */

/* Cached state of the earliest occupied slot, as the pure wheel's ``_next``. */
#define NEXT_UNKNOWN 0
#define NEXT_NONE 1
#define NEXT_KNOWN 2

/* -- module state (single-phase init: one copy per process) ---------------------------- */

static PyObject *str_wheel_tick;
static PyObject *str_wheel_where;
static PyObject *str_tick_for;
static PyObject *where_objs[NSLOTS + 2];   /* PyLongs for UNFILED, PENDING, 0 .. NSLOTS-1 */
static PyObject *low_bits_mask;            /* 2**36 - 1 */
static PyObject *sort_kwargs;              /* {"key": operator.attrgetter("_wheel_tick")} */
static PyObject *ticks_per_second_obj;
static PyObject *math_ceil;
static PyObject *statistics_class;         /* _wheel.WheelStatistics, imported on first use */

static inline PyObject *
where_obj(int where)
{
    return where_objs[where + 2];
}

/* -- entry attribute access ----------------------------------------------------------- */

typedef struct {
    PyTypeObject *type;       /* strong reference, or NULL */
    unsigned int version;     /* tp_version_tag when checked; 0 = recheck */
    Py_ssize_t tick_off;      /* -1 = generic attribute access */
    Py_ssize_t where_off;
} EntryLayout;

#define LAYOUT_CACHE 4
static EntryLayout layout_cache[LAYOUT_CACHE];
static int layout_next;

static const EntryLayout generic_layout = {NULL, 0, -1, -1};

/* Where ``_wheel_tick`` and ``_wheel_where`` live in instances of ``tp``. Never fails. */
static const EntryLayout *
layout_of(PyTypeObject *tp)
{
    for (int i = 0; i < LAYOUT_CACHE; i++) {
        EntryLayout *c = &layout_cache[i];
        if (c->type == tp) {
            if (c->version != 0 && c->version == tp->tp_version_tag
                && (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
                return c;
            }
            break;
        }
    }
    Py_ssize_t tick_off = -1, where_off = -1;
    if (tp->tp_getattro == PyObject_GenericGetAttr
        && tp->tp_setattro == PyObject_GenericSetAttr) {
        tick_off = member_offset(tp, str_wheel_tick);
        where_off = member_offset(tp, str_wheel_where);
        if (tick_off < 0 || where_off < 0) {
            tick_off = where_off = -1;
        }
    }
    /* The lookups above give the class a version tag; a change to the class clears it. */
    unsigned int version = (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    if (version == 0) {
        /* No tag to watch, so nothing to cache: use attribute access. */
        return &generic_layout;
    }
    EntryLayout *c = NULL;
    for (int i = 0; i < LAYOUT_CACHE; i++) {
        if (layout_cache[i].type == tp) {
            c = &layout_cache[i];
        }
    }
    if (c == NULL) {
        c = &layout_cache[layout_next];
        layout_next = (layout_next + 1) % LAYOUT_CACHE;
        Py_INCREF(tp);
        Py_XSETREF(c->type, tp);
    }
    c->version = version;
    c->tick_off = tick_off;
    c->where_off = where_off;
    return c;
}

/* A borrowed-free read of an entry attribute: returns a new reference or NULL with an error. */
static PyObject *
get_attr(PyObject *entry, PyObject *name, int is_tick)
{
    PyTypeObject *tp = Py_TYPE(entry);
    const EntryLayout *l = layout_of(tp);
    Py_ssize_t off = is_tick ? l->tick_off : l->where_off;
    if (off < 0) {
        return PyObject_GetAttr(entry, name);
    }
    PyObject *v = *(PyObject **)((char *)entry + off);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'",
                     tp->tp_name, name);
        return NULL;
    }
    return Py_NewRef(v);
}

static int
set_attr(PyObject *entry, PyObject *name, int is_tick, PyObject *value)
{
    const EntryLayout *l = layout_of(Py_TYPE(entry));
    Py_ssize_t off = is_tick ? l->tick_off : l->where_off;
    if (off < 0) {
        return PyObject_SetAttr(entry, name, value);
    }
    PyObject **p = (PyObject **)((char *)entry + off);
    Py_XSETREF(*p, Py_NewRef(value));
    return 0;
}

/* The fields of a WheelTimerHandle that schedule() fills, at offsets checked once. */
enum {
    H_CONTEXT, H_LOOP, H_CALLBACK, H_ARGS, H_CANCELLED, H_REPR, H_SOURCE_TRACEBACK,
    H_WHEN, H_SCHEDULED, H_WHEEL_TICK, H_WHEEL_WHERE, H_FIELDS
};

static const char *const handle_field_names[H_FIELDS] = {
    "_context", "_loop", "_callback", "_args", "_cancelled", "_repr", "_source_traceback",
    "_when", "_scheduled", "_wheel_tick", "_wheel_where",
};

static PyTypeObject *handle_type;          /* strong reference to the checked class */
static Py_ssize_t handle_offsets[H_FIELDS];

/* See "Garbage collection" above. Both are no-ops on objects already in the wanted state. */
static inline void
gc_untrack(PyObject *op)
{
    if (op != NULL && PyObject_IS_GC(op) && PyObject_GC_IsTracked(op)) {
        PyObject_GC_UnTrack(op);
    }
}

static inline void
gc_retrack(PyObject *op)
{
    if (op != NULL && PyObject_IS_GC(op) && !PyObject_GC_IsTracked(op)) {
        PyObject_GC_Track(op);
    }
}

/* An entry leaves the wheel: hand it (and the context schedule() made for it) back to the GC. */
static void
entry_left_wheel(PyObject *entry)
{
    gc_retrack(entry);
    if (handle_type != NULL && Py_IS_TYPE(entry, handle_type)) {
        gc_retrack(*(PyObject **)((char *)entry + handle_offsets[H_CONTEXT]));
    }
}

static int
set_where(PyObject *entry, int where)
{
    if (where == UNFILED) {
        entry_left_wheel(entry);
    }
    return set_attr(entry, str_wheel_where, 0, where_obj(where));
}

/* The entry's ``_wheel_where`` as a C int; -3 with an error set on failure. */
static int
get_where(PyObject *entry)
{
    PyObject *v = get_attr(entry, str_wheel_where, 0);
    if (v == NULL) {
        return -3;
    }
    int overflow = 0;
    long w = PyLong_Check(v) ? PyLong_AsLongAndOverflow(v, &overflow) : -3;
    Py_DECREF(v);
    if (w == -1 && PyErr_Occurred()) {
        return -3;
    }
    if (overflow || w < UNFILED || w >= NSLOTS) {
        PyErr_Format(PyExc_ValueError, "entry has an invalid _wheel_where");
        return -3;
    }
    return (int)w;
}

/* An int tick as the wheel's int64 stand-in (see "Tick range" above); -1 on error. */
static int
tick_value(PyObject *tick, int64_t *out)
{
    if (!PyLong_Check(tick)) {
        PyErr_Format(PyExc_TypeError, "a tick must be an int, not %.100s",
                     Py_TYPE(tick)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(tick, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow < 0 || (!overflow && v < -HUGE_TICK)) {
        *out = -HUGE_TICK;
        return 0;
    }
    if (overflow > 0 || v >= HUGE_TICK) {
        PyObject *low = PyNumber_And(tick, low_bits_mask);
        if (low == NULL) {
            return -1;
        }
        long long lv = PyLong_AsLongLong(low);
        Py_DECREF(low);
        if (lv == -1 && PyErr_Occurred()) {
            return -1;
        }
        *out = HUGE_TICK | (int64_t)lv;
        return 0;
    }
    *out = (int64_t)v;
    return 0;
}

/* The entry's ``_wheel_tick`` as the wheel's int64 stand-in; -1 on error. */
static int
get_tick(PyObject *entry, int64_t *out)
{
    PyObject *v = get_attr(entry, str_wheel_tick, 1);
    if (v == NULL) {
        return -1;
    }
    int r = tick_value(v, out);
    Py_DECREF(v);
    return r;
}

/* -- the wheel ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *slots[NSLOTS];     /* dict entry -> None, in arrival order; never NULL */
    PyObject *pending;           /* dict of entries already due; never NULL */
    uint64_t occupied[NUM_LEVELS];
    int64_t elapsed;
    Py_ssize_t count;
    int next_state;
    int next_level;
    int next_slot;
    int64_t next_start;
} Wheel;

static PyTypeObject Wheel_Type;

/* dict[entry] = None and del dict[entry], holding the dict: hashing an entry may run Python
 * code that re-enters the wheel and swaps the container out of its slot. */
static int
dict_add(PyObject *dict, PyObject *entry)
{
    Py_INCREF(dict);
    int r = PyDict_SetItem(dict, entry, Py_None);
    Py_DECREF(dict);
    return r;
}

static int
dict_del(PyObject *dict, PyObject *entry)
{
    Py_INCREF(dict);
    int r = PyDict_DelItem(dict, entry);
    if (r == 0 && PyDict_GET_SIZE(dict) == 0) {
        /* A dict never shrinks as keys are deleted; clearing drops its table at once. */
        PyDict_Clear(dict);
        r = 1;
    }
    Py_DECREF(dict);
    return r;
}

static inline int
level_for(int64_t elapsed, int64_t tick)
{
    uint64_t x = ((uint64_t)elapsed ^ (uint64_t)tick) | SLOT_MASK;
    int bits = 64 - __builtin_clzll(x);
    return bits > SPAN_BITS ? TOP : (bits - 1) / SLOT_BITS;
}

/* File ``entry`` (already counted, tick already stored) relative to ``self->elapsed``. */
static int
wheel_file(Wheel *self, PyObject *entry, int64_t tick)
{
    self->next_state = NEXT_UNKNOWN;
    if (tick <= self->elapsed) {
        if (dict_add(self->pending, entry) < 0) {
            return -1;
        }
        return set_where(entry, PENDING);
    }
    int level = level_for(self->elapsed, tick);
    int slot = (int)((tick >> (level * SLOT_BITS)) & SLOT_MASK);
    int where = (level << SLOT_BITS) | slot;
    if (dict_add(self->slots[where], entry) < 0) {
        return -1;
    }
    self->occupied[level] |= (uint64_t)1 << slot;
    return set_where(entry, where);
}

/* Delete ``entry`` from slot ``where``; an emptied slot gives its memory back at once. */
static int
wheel_unlink_slot(Wheel *self, PyObject *entry, int where)
{
    int r = dict_del(self->slots[where], entry);
    if (r < 0) {
        return -1;
    }
    if (r == 1 && PyDict_GET_SIZE(self->slots[where]) == 0) {
        self->occupied[where >> SLOT_BITS] &= ~((uint64_t)1 << (where & SLOT_MASK));
    }
    return 0;
}

static int
wheel_unlink(Wheel *self, PyObject *entry, int where)
{
    self->next_state = NEXT_UNKNOWN;
    if (where >= 0) {
        return wheel_unlink_slot(self, entry, where);
    }
    if (where == PENDING) {
        return dict_del(self->pending, entry) < 0 ? -1 : 0;
    }
    PyErr_Format(PyExc_ValueError, "%R is not in a wheel", entry);
    return -1;
}

static void
wheel_next_expiration(Wheel *self)
{
    int64_t elapsed = self->elapsed;
    for (int level = 0; level < NUM_LEVELS; level++) {
        uint64_t occ = self->occupied[level];
        if (!occ) {
            continue;
        }
        int shift = level * SLOT_BITS;
        /* Search from the slot after "now"; only the top level's slot behind "now" is
         * occupied, and it belongs to the next lap. */
        int first = (int)(((elapsed >> shift) + 1) & SLOT_MASK);
        uint64_t rotated = first ? ((occ >> first) | (occ << (SLOTS - first))) : occ;
        int slot = (__builtin_ctzll(rotated) + first) & SLOT_MASK;
        int64_t level_span = (int64_t)1 << (shift + SLOT_BITS);
        int64_t start = (elapsed & -level_span) + ((int64_t)slot << shift);
        if (start <= elapsed) {
            start += level_span;
        }
        self->next_state = NEXT_KNOWN;
        self->next_level = level;
        self->next_slot = slot;
        self->next_start = start;
        return;
    }
    self->next_state = NEXT_NONE;
}

static int
Wheel_init(Wheel *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"elapsed", NULL};
    PyObject *elapsed_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:TimerWheel", kwlist, &elapsed_obj)) {
        return -1;
    }
    int64_t elapsed = 0;
    if (elapsed_obj != NULL) {
        if (!PyLong_Check(elapsed_obj)) {
            PyErr_Format(PyExc_TypeError, "elapsed must be an int, not %.100s",
                         Py_TYPE(elapsed_obj)->tp_name);
            return -1;
        }
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(elapsed_obj, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow < 0 || (!overflow && v < 0)) {
            PyErr_Format(PyExc_ValueError, "elapsed must be >= 0, got %R", elapsed_obj);
            return -1;
        }
        if (overflow > 0 || v > MAX_ELAPSED) {
            PyErr_Format(PyExc_OverflowError,
                         "elapsed %R is beyond the accelerated wheel's range (2**61 ticks)",
                         elapsed_obj);
            return -1;
        }
        elapsed = (int64_t)v;
    }
    for (int i = 0; i < NSLOTS; i++) {
        if (self->slots[i] == NULL) {
            self->slots[i] = PyDict_New();
            if (self->slots[i] == NULL) {
                return -1;
            }
        }
        else {
            PyDict_Clear(self->slots[i]);
        }
        if (i < NUM_LEVELS) {
            self->occupied[i] = 0;
        }
    }
    if (self->pending == NULL) {
        self->pending = PyDict_New();
        if (self->pending == NULL) {
            return -1;
        }
    }
    else {
        PyDict_Clear(self->pending);
    }
    self->elapsed = elapsed;
    self->count = 0;
    self->next_state = NEXT_NONE;
    return 0;
}

/* Slots and pending are created in tp_new so that every method can rely on them. */
static PyObject *
Wheel_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Wheel *self = (Wheel *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    for (int i = 0; i < NSLOTS; i++) {
        self->slots[i] = PyDict_New();
        if (self->slots[i] == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    self->pending = PyDict_New();
    if (self->pending == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->next_state = NEXT_NONE;
    return (PyObject *)self;
}

static int
Wheel_traverse(Wheel *self, visitproc visit, void *arg)
{
    for (int i = 0; i < NSLOTS; i++) {
        Py_VISIT(self->slots[i]);
    }
    Py_VISIT(self->pending);
    /* No visit of the type: it is static, and subtype_traverse visits a heap subclass. */
    return 0;
}

/* Breaks cycles by emptying the containers, which stay valid: a finalizer that still calls
 * into the wheel finds an empty one, never a NULL. */
static void
retrack_all(Wheel *self)
{
    for (int i = 0; i <= NSLOTS; i++) {
        PyObject *bucket = i < NSLOTS ? self->slots[i] : self->pending;
        Py_ssize_t pos = 0;
        PyObject *entry, *value;
        while (bucket != NULL && PyDict_Next(bucket, &pos, &entry, &value)) {
            entry_left_wheel(entry);
        }
    }
}

static int
Wheel_clear(Wheel *self)
{
    retrack_all(self);
    for (int i = 0; i < NSLOTS; i++) {
        if (self->slots[i] != NULL) {
            PyDict_Clear(self->slots[i]);
        }
    }
    if (self->pending != NULL) {
        PyDict_Clear(self->pending);
    }
    for (int i = 0; i < NUM_LEVELS; i++) {
        self->occupied[i] = 0;
    }
    self->count = 0;
    self->next_state = NEXT_NONE;
    return 0;
}

static void
Wheel_dealloc(Wheel *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    retrack_all(self);
    for (int i = 0; i < NSLOTS; i++) {
        Py_CLEAR(self->slots[i]);
    }
    Py_CLEAR(self->pending);
    /* A heap subclass's type reference is dropped by subtype_dealloc, not here. */
    tp->tp_free((PyObject *)self);
}

/* -- queries -------------------------------------------------------------------------- */

static PyObject *
Wheel_get_elapsed(Wheel *self, void *closure)
{
    return PyLong_FromLongLong(self->elapsed);
}

static Py_ssize_t
Wheel_len(Wheel *self)
{
    return self->count;
}

static int
Wheel_bool(Wheel *self)
{
    return self->count > 0;
}

static PyObject *
Wheel_poll_at(Wheel *self, PyObject *unused)
{
    if (!self->count) {
        Py_RETURN_NONE;
    }
    if (PyDict_GET_SIZE(self->pending)) {
        return PyLong_FromLongLong(self->elapsed);
    }
    if (self->next_state == NEXT_UNKNOWN) {
        wheel_next_expiration(self);
    }
    if (self->next_state != NEXT_KNOWN) {
        PyErr_Format(PyExc_AssertionError,
                     "wheel holds %zd entries but no slot is occupied", self->count);
        return NULL;
    }
    return PyLong_FromLongLong(self->next_start);
}

static PyObject *
Wheel_statistics(Wheel *self, PyObject *unused)
{
    if (statistics_class == NULL) {
        PyObject *mod = PyImport_ImportModule("minidb.runtime._wheel");
        if (mod == NULL) {
            return NULL;
        }
        statistics_class = PyObject_GetAttrString(mod, "WheelStatistics");
        Py_DECREF(mod);
        if (statistics_class == NULL) {
            return NULL;
        }
    }
    PyObject *per_level = PyTuple_New(NUM_LEVELS);
    if (per_level == NULL) {
        return NULL;
    }
    for (int level = 0; level < NUM_LEVELS; level++) {
        Py_ssize_t n = 0;
        for (int s = 0; s < SLOTS; s++) {
            n += PyDict_GET_SIZE(self->slots[(level << SLOT_BITS) | s]);
        }
        PyObject *v = PyLong_FromSsize_t(n);
        if (v == NULL) {
            Py_DECREF(per_level);
            return NULL;
        }
        PyTuple_SET_ITEM(per_level, level, v);
    }
    PyObject *next = Wheel_poll_at(self, NULL);
    if (next == NULL) {
        Py_DECREF(per_level);
        return NULL;
    }
    PyObject *kwargs = Py_BuildValue("{s:L,s:n,s:n,s:N,s:N}",
                                     "elapsed", (long long)self->elapsed,
                                     "entries", self->count,
                                     "pending", PyDict_GET_SIZE(self->pending),
                                     "per_level", per_level,
                                     "next_expiration", next);
    if (kwargs == NULL) {
        return NULL;
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) {
        Py_DECREF(kwargs);
        return NULL;
    }
    PyObject *result = PyObject_Call(statistics_class, empty, kwargs);
    Py_DECREF(empty);
    Py_DECREF(kwargs);
    return result;
}

/* Every entry, pending ones first, in no promised order (a snapshot: mutating the wheel
 * while iterating is safe). */
static PyObject *
wheel_entries(Wheel *self)
{
    PyObject *out = PySequence_List(self->pending);
    if (out == NULL) {
        return NULL;
    }
    for (int i = 0; i < NSLOTS; i++) {
        if (PyDict_GET_SIZE(self->slots[i]) == 0) {
            continue;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(self->slots[i], &pos, &key, &value)) {
            if (PyList_Append(out, key) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
    }
    return out;
}

static PyObject *
Wheel_iter(Wheel *self)
{
    PyObject *entries = wheel_entries(self);
    if (entries == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(entries);
    Py_DECREF(entries);
    return it;
}

/* -- mutation ------------------------------------------------------------------------- */

static PyObject *
Wheel_insert(Wheel *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "insert() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *entry = args[0], *tick_obj = args[1];
    int64_t tick;
    if (tick_value(tick_obj, &tick) < 0) {
        return NULL;
    }
    int where = get_where(entry);
    if (where == -3) {
        return NULL;
    }
    if (where != UNFILED) {
        PyErr_Format(PyExc_ValueError, "%R is already in a wheel", entry);
        return NULL;
    }
    if (set_attr(entry, str_wheel_tick, 1, tick_obj) < 0) {
        return NULL;
    }
    self->count++;
    if (wheel_file(self, entry, tick) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Wheel_remove(Wheel *self, PyObject *entry)
{
    self->next_state = NEXT_UNKNOWN;
    int where = get_where(entry);
    if (where == -3) {
        return NULL;
    }
    if (wheel_unlink(self, entry, where) < 0) {
        return NULL;
    }
    if (set_where(entry, UNFILED) < 0) {
        return NULL;
    }
    self->count--;
    Py_RETURN_NONE;
}

static int
wheel_reset(Wheel *self, PyObject *entry, PyObject *tick_obj)
{
    int64_t tick;
    if (tick_value(tick_obj, &tick) < 0) {
        return -1;
    }
    int where = get_where(entry);
    if (where == -3) {
        return -1;
    }
    if (wheel_unlink(self, entry, where) < 0) {
        return -1;
    }
    if (set_attr(entry, str_wheel_tick, 1, tick_obj) < 0) {
        return -1;
    }
    return wheel_file(self, entry, tick);
}

static PyObject *
Wheel_reset(Wheel *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "reset() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (wheel_reset(self, args[0], args[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Sort ``list`` in place by each entry's real ``_wheel_tick`` (stable: FIFO among equals). */
static int
sort_by_tick(PyObject *list)
{
    PyObject *sort = PyObject_GetAttrString(list, "sort");
    if (sort == NULL) {
        return -1;
    }
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL) {
        Py_DECREF(sort);
        return -1;
    }
    PyObject *r = PyObject_Call(sort, empty, sort_kwargs);
    Py_DECREF(empty);
    Py_DECREF(sort);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

/* Release a higher-level slot whose whole span is due, grouped by tick, without cascading;
 * entries for a later lap are re-filed. ``bucket`` is owned by the caller. */
static int
wheel_release_whole(Wheel *self, PyObject *bucket, int64_t end, PyObject *out)
{
    PyObject *due = PyList_New(0);
    PyObject *later = PyList_New(0);
    if (due == NULL || later == NULL) {
        goto error;
    }
    Py_ssize_t pos = 0;
    PyObject *entry, *value;
    while (PyDict_Next(bucket, &pos, &entry, &value)) {
        int64_t tick;
        if (get_tick(entry, &tick) < 0) {
            goto error;
        }
        if (tick >= end) {
            if (PyList_Append(later, entry) < 0) {
                goto error;
            }
            continue;
        }
        if (set_where(entry, UNFILED) < 0 || PyList_Append(due, entry) < 0) {
            goto error;
        }
    }
    if (sort_by_tick(due) < 0) {
        goto error;
    }
    Py_ssize_t n = PyList_GET_SIZE(due);
    if (PyList_SetSlice(out, PyList_GET_SIZE(out), PyList_GET_SIZE(out), due) < 0) {
        goto error;
    }
    self->count -= n;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(later); i++) {
        PyObject *e = PyList_GET_ITEM(later, i);
        int64_t tick;
        if (get_tick(e, &tick) < 0 || wheel_file(self, e, tick) < 0) {
            goto error;
        }
    }
    Py_DECREF(due);
    Py_DECREF(later);
    return 0;
error:
    Py_XDECREF(due);
    Py_XDECREF(later);
    return -1;
}

/* Release or cascade every entry of the earliest occupied slot, whose start has come. */
static int
wheel_process(Wheel *self, int level, int slot, int64_t start, int64_t now, PyObject *out)
{
    int where = (level << SLOT_BITS) | slot;
    PyObject *fresh = PyDict_New();
    if (fresh == NULL) {
        return -1;
    }
    PyObject *bucket = self->slots[where];   /* now owned here */
    self->slots[where] = fresh;
    self->occupied[level] &= ~((uint64_t)1 << slot);
    self->elapsed = start;
    int64_t end = start + ((int64_t)1 << (level * SLOT_BITS));
    int r = 0;
    if (level && end <= now + 1) {
        r = wheel_release_whole(self, bucket, end, out);
        Py_DECREF(bucket);
        return r;
    }
    Py_ssize_t released = 0;
    Py_ssize_t pos = 0;
    PyObject *entry, *value;
    while (PyDict_Next(bucket, &pos, &entry, &value)) {
        int64_t tick;
        if (get_tick(entry, &tick) < 0) {
            r = -1;
            break;
        }
        if (tick <= start) {
            if (set_where(entry, UNFILED) < 0 || PyList_Append(out, entry) < 0) {
                r = -1;
                break;
            }
            released++;
            continue;
        }
        /* Cascade relative to the slot's start (tick > start: never pending). */
        int lvl = level_for(start, tick);
        int s = (int)((tick >> (lvl * SLOT_BITS)) & SLOT_MASK);
        int target = (lvl << SLOT_BITS) | s;
        if (dict_add(self->slots[target], entry) < 0) {
            r = -1;
            break;
        }
        self->occupied[lvl] |= (uint64_t)1 << s;
        if (set_where(entry, target) < 0) {
            r = -1;
            break;
        }
    }
    self->count -= released;
    Py_DECREF(bucket);
    return r;
}

static PyObject *
Wheel_poll(Wheel *self, PyObject *now_obj)
{
    if (!PyLong_Check(now_obj)) {
        PyErr_Format(PyExc_TypeError, "now must be an int, not %.100s",
                     Py_TYPE(now_obj)->tp_name);
        return NULL;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(now_obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow > 0 || v > MAX_ELAPSED) {
        PyErr_Format(PyExc_OverflowError,
                     "tick %R is beyond the accelerated wheel's range (2**61 ticks)", now_obj);
        return NULL;
    }
    /* Any "now" before elapsed advances nothing; a huge negative one is clamped. */
    int64_t now = (overflow < 0 || v < -MAX_ELAPSED) ? -MAX_ELAPSED : (int64_t)v;

    PyObject *out;
    if (!self->count) {
        if (now > self->elapsed) {
            self->elapsed = now;
        }
        return PyList_New(0);
    }
    if (PyDict_GET_SIZE(self->pending)) {
        PyObject *fresh = PyDict_New();
        if (fresh == NULL) {
            return NULL;
        }
        PyObject *pending = self->pending;
        self->pending = fresh;
        out = PySequence_List(pending);
        Py_DECREF(pending);
        if (out == NULL) {
            return NULL;
        }
        if (sort_by_tick(out) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) {
            if (set_where(PyList_GET_ITEM(out, i), UNFILED) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
        self->count -= PyList_GET_SIZE(out);
    }
    else {
        out = PyList_New(0);
        if (out == NULL) {
            return NULL;
        }
    }
    while (self->count) {
        if (self->next_state == NEXT_UNKNOWN) {
            wheel_next_expiration(self);
        }
        if (self->next_state != NEXT_KNOWN || self->next_start > now) {
            break;
        }
        self->next_state = NEXT_UNKNOWN;
        if (wheel_process(self, self->next_level, self->next_slot, self->next_start, now, out)
            < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    if (now > self->elapsed) {
        self->elapsed = now;
    }
    return out;
}

static PyObject *
Wheel_clear_method(Wheel *self, PyObject *unused)
{
    PyObject *out = wheel_entries(self);
    if (out == NULL) {
        return NULL;
    }
    Wheel_clear(self);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(out); i++) {
        if (set_where(PyList_GET_ITEM(out, i), UNFILED) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *
Wheel_sizeof(Wheel *self, PyObject *unused)
{
    return PyLong_FromSsize_t(Py_TYPE(self)->tp_basicsize);
}

static PyMethodDef Wheel_methods[] = {
    {"insert", (PyCFunction)(void (*)(void))Wheel_insert, METH_FASTCALL,
     "File entry to come due at tick; a tick at or before elapsed is due now."},
    {"remove", (PyCFunction)Wheel_remove, METH_O,
     "Take entry out of the wheel at once (O(1)); it must be in this wheel."},
    {"reset", (PyCFunction)(void (*)(void))Wheel_reset, METH_FASTCALL,
     "Move entry's deadline to tick in place (O(1)); it must be in this wheel."},
    {"poll", (PyCFunction)Wheel_poll, METH_O,
     "Advance to tick now and return every entry due by then, in deadline order."},
    {"poll_at", (PyCFunction)Wheel_poll_at, METH_NOARGS,
     "The tick at which poll has work to do, or None when the wheel is empty."},
    {"clear", (PyCFunction)Wheel_clear_method, METH_NOARGS,
     "Remove and return every entry, in no particular order."},
    {"statistics", (PyCFunction)Wheel_statistics, METH_NOARGS,
     "A point-in-time WheelStatistics of this wheel."},
    {"__sizeof__", (PyCFunction)Wheel_sizeof, METH_NOARGS, NULL},
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS, "See PEP 585."},
    {NULL, NULL, 0, NULL}
};

static PyGetSetDef Wheel_getset[] = {
    {"elapsed", (getter)Wheel_get_elapsed, NULL, "The tick the wheel has been advanced to.", NULL},
    {NULL, NULL, NULL, NULL, NULL}
};

static PySequenceMethods Wheel_as_sequence = {
    .sq_length = (lenfunc)Wheel_len,
};

static PyNumberMethods Wheel_as_number = {
    .nb_bool = (inquiry)Wheel_bool,
};

static PyTypeObject Wheel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minidb.runtime._cwheel.TimerWheel",
    .tp_doc = "Six levels of 64 slots of entries, advanced by poll(now); "
              "the C twin of minidb.runtime._wheel.TimerWheel.",
    .tp_basicsize = sizeof(Wheel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = Wheel_new,
    .tp_init = (initproc)Wheel_init,
    .tp_dealloc = (destructor)Wheel_dealloc,
    .tp_traverse = (traverseproc)Wheel_traverse,
    .tp_clear = (inquiry)Wheel_clear,
    .tp_iter = (getiterfunc)Wheel_iter,
    .tp_methods = Wheel_methods,
    .tp_getset = Wheel_getset,
    .tp_as_sequence = &Wheel_as_sequence,
    .tp_as_number = &Wheel_as_number,
};

/* -- schedule(): call_at without bytecode --------------------------------------------- */

/* (The handle fields schedule() fills are declared above, with the GC helpers.) */

/* Check that instances of ``cls`` keep every field schedule() fills in a plain object slot,
 * and remember the offsets. Returns 1 if so, 0 if not (callers use the pure path), -1 on
 * error. The instance layout of a class never changes, so the offsets stay valid. */
static int
check_handle_class(PyObject *cls)
{
    if (handle_type != NULL) {
        /* One class for the life of the process: the GC bookkeeping of handles already in a
         * wheel (see "Garbage collection") relies on recognising them by it. */
        return (PyObject *)handle_type == cls;
    }
    if (!PyType_Check(cls)) {
        return 0;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (tp->tp_alloc == NULL || tp->tp_dictoffset != 0 || !PyType_IS_GC(tp)
        || (tp->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) {
        return 0;
    }
    Py_ssize_t offsets[H_FIELDS];
    int found = member_offsets(tp, handle_field_names, H_FIELDS, offsets);
    if (found < H_FIELDS) {
        return found < 0 ? -1 : 0;
    }
    Py_INCREF(tp);
    Py_XSETREF(handle_type, tp);
    memcpy(handle_offsets, offsets, sizeof(offsets));
    return 1;
}

static PyObject *
cwheel_check_handle_class(PyObject *module, PyObject *cls)
{
    int r = check_handle_class(cls);
    if (r < 0) {
        return NULL;
    }
    return PyBool_FromLong(r);
}

static inline void
fill(PyObject *obj, int field, PyObject *value)
{
    PyObject **p = (PyObject **)((char *)obj + handle_offsets[field]);
    Py_XSETREF(*p, Py_NewRef(value));
}

/* Recently made tick ints, by tick modulo TICK_CACHE. Timers set in a burst share a few hundred
 * distinct ticks; sharing their int objects saves an allocation per timer and, above all, an
 * object per timer for the cyclic GC to touch on every full collection. */
#define TICK_CACHE 1024
static PyObject *tick_cache[TICK_CACHE];

static PyObject *
tick_object(long long tick)
{
    PyObject **cached = &tick_cache[(unsigned long long)tick % TICK_CACHE];
    if (*cached != NULL && PyLong_AsLongLong(*cached) == tick) {
        return Py_NewRef(*cached);
    }
    PyObject *obj = PyLong_FromLongLong(tick);
    if (obj != NULL) {
        Py_XSETREF(*cached, Py_NewRef(obj));
    }
    return obj;
}

/* ``math.ceil(when * TICKS_PER_SECOND - tolerance)`` exactly as the loop computes it, falling
 * back to ``loop._tick_for(when)`` on OverflowError or ValueError, as the loop does. */
static PyObject *
tick_for(PyObject *loop, PyObject *when, PyObject *tolerance, int rewrap_type_error)
{
    if (PyFloat_CheckExact(when) && PyFloat_CheckExact(tolerance)) {
        /* Two IEEE operations, as in Python (built with -ffp-contract=off: no fused FMA). */
        volatile double x = PyFloat_AS_DOUBLE(when) * (double)TICKS_PER_SECOND;
        double y = x - PyFloat_AS_DOUBLE(tolerance);
        if (isfinite(y)) {
            double c = ceil(y);
            if (c > -9.0e18 && c < 9.0e18) {
                return tick_object((long long)c);
            }
            return PyLong_FromDouble(c);
        }
    }
    else {
        PyObject *product = PyNumber_Multiply(when, ticks_per_second_obj);
        if (product != NULL) {
            PyObject *diff = PyNumber_Subtract(product, tolerance);
            Py_DECREF(product);
            if (diff != NULL) {
                PyObject *r = PyObject_CallOneArg(math_ceil, diff);
                Py_DECREF(diff);
                if (r != NULL) {
                    return r;
                }
            }
        }
        if (rewrap_type_error && PyErr_ExceptionMatches(PyExc_TypeError)) {
            /* As loop.reschedule words it (``raise TypeError(...) from None``). */
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "when must be a number, not %.100s",
                         Py_TYPE(when)->tp_name);
            return NULL;
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)
            && !PyErr_ExceptionMatches(PyExc_ValueError)) {
            return NULL;
        }
        PyErr_Clear();
    }
    /* Infinity or NaN: the loop decides (far future, or due at once). */
    return PyObject_CallMethodOneArg(loop, str_tick_for, when);
}

static PyObject *
cwheel_schedule(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "schedule() takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *loop = args[0], *wheel_obj = args[1], *cls = args[2], *when = args[3];
    PyObject *callback = args[4], *cb_args = args[5], *context = args[6], *tolerance = args[7];
    if (!PyObject_TypeCheck(wheel_obj, &Wheel_Type)) {
        PyErr_Format(PyExc_TypeError, "schedule() needs a _cwheel.TimerWheel, not %.100s",
                     Py_TYPE(wheel_obj)->tp_name);
        return NULL;
    }
    Wheel *wheel = (Wheel *)wheel_obj;
    int ok = check_handle_class(cls);
    if (ok <= 0) {
        if (ok == 0) {
            PyErr_Format(PyExc_TypeError, "%R cannot be scheduled by the accelerator", cls);
        }
        return NULL;
    }
    if (when == Py_None) {
        PyErr_SetString(PyExc_TypeError, "when cannot be None");
        return NULL;
    }
    PyObject *tick_obj = tick_for(loop, when, tolerance, 0);
    if (tick_obj == NULL) {
        return NULL;
    }
    int64_t tick;
    if (tick_value(tick_obj, &tick) < 0) {
        Py_DECREF(tick_obj);
        return NULL;
    }
    PyObject *ctx;
    if (context == Py_None) {
        ctx = PyContext_CopyCurrent();
        if (ctx == NULL) {
            Py_DECREF(tick_obj);
            return NULL;
        }
    }
    else {
        ctx = Py_NewRef(context);
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    PyObject *handle = tp->tp_alloc(tp, 0);
    if (handle == NULL) {
        Py_DECREF(ctx);
        Py_DECREF(tick_obj);
        return NULL;
    }
    /* The fields of Handle.__init__ and TimerHandle.__init__ (debug mode never comes here). */
    fill(handle, H_CONTEXT, ctx);
    Py_DECREF(ctx);
    fill(handle, H_LOOP, loop);
    fill(handle, H_CALLBACK, callback);
    fill(handle, H_ARGS, cb_args);
    fill(handle, H_CANCELLED, Py_False);
    fill(handle, H_REPR, Py_None);
    fill(handle, H_SOURCE_TRACEBACK, Py_None);
    fill(handle, H_WHEN, when);
    fill(handle, H_SCHEDULED, Py_False);
    fill(handle, H_WHEEL_TICK, tick_obj);
    Py_DECREF(tick_obj);
    /* TimerWheel.insert, with the handle's fields at known offsets. */
    wheel->next_state = NEXT_UNKNOWN;
    int where;
    PyObject *bucket;
    if (tick <= wheel->elapsed) {
        where = PENDING;
        bucket = wheel->pending;
    }
    else {
        int level = level_for(wheel->elapsed, tick);
        int slot = (int)((tick >> (level * SLOT_BITS)) & SLOT_MASK);
        where = (level << SLOT_BITS) | slot;
        bucket = wheel->slots[where];
        if (dict_add(bucket, handle) < 0) {
            Py_DECREF(handle);
            return NULL;
        }
        wheel->occupied[level] |= (uint64_t)1 << slot;
        bucket = NULL;
    }
    if (bucket != NULL && dict_add(bucket, handle) < 0) {
        Py_DECREF(handle);
        return NULL;
    }
    wheel->count++;
    fill(handle, H_WHEEL_WHERE, where_obj(where));
    fill(handle, H_SCHEDULED, Py_True);
    gc_untrack(handle);
    if (context == Py_None) {
        /* Only a context copied here is the handle's alone; a caller's may be shared. */
        gc_untrack(*(PyObject **)((char *)handle + handle_offsets[H_CONTEXT]));
    }
    return handle;
}

static PyObject *str_scheduled;
static PyObject *str_loop;
static PyObject *str_when;

/* ``loop.reschedule(handle, when)``: move an armed timer in place; see ``_loop.py``. */
static PyObject *
cwheel_reschedule(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "reschedule() takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *loop = args[0], *wheel = args[1], *handle = args[2], *when = args[3];
    PyObject *tolerance = args[4];
    int known = handle_type != NULL && Py_IS_TYPE(handle, handle_type);
    PyObject *scheduled;
    if (known) {
        scheduled = *(PyObject **)((char *)handle + handle_offsets[H_SCHEDULED]);
        Py_XINCREF(scheduled);
    }
    else {
        scheduled = PyObject_GetAttr(handle, str_scheduled);
    }
    if (scheduled == NULL) {
        if (known || PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%R is not a timer handle", handle);
        }
        return NULL;
    }
    int armed = PyObject_IsTrue(scheduled);
    Py_DECREF(scheduled);
    if (armed <= 0) {
        return armed < 0 ? NULL : Py_NewRef(Py_False);
    }
    PyObject *owner;
    if (known) {
        owner = *(PyObject **)((char *)handle + handle_offsets[H_LOOP]);
        Py_XINCREF(owner);
        if (owner == NULL) {
            PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '_loop'",
                         Py_TYPE(handle)->tp_name);
        }
    }
    else {
        owner = PyObject_GetAttr(handle, str_loop);
    }
    if (owner == NULL) {
        return NULL;
    }
    Py_DECREF(owner);   /* only its identity is needed */
    if (owner != loop) {
        PyErr_Format(PyExc_ValueError, "%R is not a timer of this loop", handle);
        return NULL;
    }
    PyObject *tick_obj = tick_for(loop, when, tolerance, 1);
    if (tick_obj == NULL) {
        return NULL;
    }
    int r;
    if (known) {
        fill(handle, H_WHEN, when);
        r = 0;
    }
    else {
        r = PyObject_SetAttr(handle, str_when, when);
    }
    if (r == 0) {
        if (PyObject_TypeCheck(wheel, &Wheel_Type)) {
            r = wheel_reset((Wheel *)wheel, handle, tick_obj);
        }
        else {
            PyObject *res = PyObject_CallMethod(wheel, "reset", "OO", handle, tick_obj);
            r = res == NULL ? -1 : 0;
            Py_XDECREF(res);
        }
    }
    Py_DECREF(tick_obj);
    if (r < 0) {
        return NULL;
    }
    Py_RETURN_TRUE;
}

static PyObject *str_wheel;
static PyObject *str_debug;
static PyObject *str_cancel_py;

/* A field of a handle of the checked class, as a new reference, or NULL with AttributeError. */
static PyObject *
field(PyObject *handle, int index)
{
    PyObject *v = *(PyObject **)((char *)handle + handle_offsets[index]);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(handle)->tp_name, handle_field_names[index]);
        return NULL;
    }
    return Py_NewRef(v);
}

/* WheelTimerHandle.cancel: unlink from the wheel at once, then forget the callback, as the
 * Python method does (which instances of subclasses still run). */
static PyObject *
handle_cancel(PyObject *self, PyObject *unused)
{
    if (handle_type == NULL || !Py_IS_TYPE(self, handle_type)) {
        return PyObject_CallMethodNoArgs(self, str_cancel_py);
    }
    PyObject *cancelled = field(self, H_CANCELLED);
    if (cancelled == NULL) {
        return NULL;
    }
    int done = PyObject_IsTrue(cancelled);
    Py_DECREF(cancelled);
    if (done) {
        return done < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *loop = field(self, H_LOOP);
    if (loop == NULL) {
        return NULL;
    }
    PyObject *scheduled = field(self, H_SCHEDULED);
    int armed = scheduled == NULL ? -1 : PyObject_IsTrue(scheduled);
    Py_XDECREF(scheduled);
    if (armed < 0) {
        goto error;
    }
    if (armed) {
        PyObject *wheel = PyObject_GetAttr(loop, str_wheel);
        if (wheel == NULL) {
            goto error;
        }
        PyObject *r = PyObject_TypeCheck(wheel, &Wheel_Type)
            ? Wheel_remove((Wheel *)wheel, self)
            : PyObject_CallMethod(wheel, "remove", "O", self);
        Py_DECREF(wheel);
        if (r == NULL) {
            goto error;
        }
        Py_DECREF(r);
        fill(self, H_SCHEDULED, Py_False);
    }
    fill(self, H_CANCELLED, Py_True);
    PyObject *debug = PyObject_GetAttr(loop, str_debug);
    int verbose = debug == NULL ? -1 : PyObject_IsTrue(debug);
    Py_XDECREF(debug);
    if (verbose < 0) {
        goto error;
    }
    if (verbose) {
        /* Keep a representation for debug messages, as Handle.cancel does. */
        PyObject *repr = PyObject_Repr(self);
        if (repr == NULL) {
            goto error;
        }
        fill(self, H_REPR, repr);
        Py_DECREF(repr);
    }
    fill(self, H_CALLBACK, Py_None);
    fill(self, H_ARGS, Py_None);
    Py_DECREF(loop);
    Py_RETURN_NONE;
error:
    Py_DECREF(loop);
    return NULL;
}

static PyMethodDef handle_cancel_def = {
    "cancel", (PyCFunction)handle_cancel, METH_NOARGS,
    "Cancel the timer: unlink it from the wheel at once and drop its callback."
};

static PyObject *
cwheel_cancel_method(PyObject *module, PyObject *cls)
{
    int ok = check_handle_class(cls);
    if (ok <= 0) {
        if (ok == 0) {
            PyErr_Format(PyExc_TypeError, "%R cannot be handled by the accelerator", cls);
        }
        return NULL;
    }
    return PyDescr_NewMethod((PyTypeObject *)cls, &handle_cancel_def);
}

static PyMethodDef module_methods[] = {
    {"cancel_method", cwheel_cancel_method, METH_O,
     "cancel_method(cls) -> a C cancel() for cls (instances of subclasses call _cancel_py)."},
    {"reschedule", (PyCFunction)(void (*)(void))cwheel_reschedule, METH_FASTCALL,
     "reschedule(loop, wheel, handle, when, tick_tolerance) -> bool\n\n"
     "The body of WheelEventLoop.reschedule: move an armed timer of loop to when, in place."},
    {"schedule", (PyCFunction)(void (*)(void))cwheel_schedule, METH_FASTCALL,
     "schedule(loop, wheel, cls, when, callback, args, context, tick_tolerance) -> handle\n\n"
     "Make a cls timer handle (the fields of TimerHandle.__init__, no debug traceback), file it\n"
     "on wheel at ceil(when * TICKS_PER_SECOND - tick_tolerance) and mark it scheduled."},
    {"check_handle_class", cwheel_check_handle_class, METH_O,
     "Whether schedule() can fill instances of cls (every field a plain __slots__ member)."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef cwheel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "minidb.runtime._cwheel",
    .m_doc = "The timer wheel's hot path in C; see minidb.runtime._wheel for the semantics.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__cwheel(void)
{
    if (PyType_Ready(&Wheel_Type) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&cwheel_module);
    if (m == NULL) {
        return NULL;
    }
    str_wheel_tick = PyUnicode_InternFromString("_wheel_tick");
    str_wheel_where = PyUnicode_InternFromString("_wheel_where");
    str_tick_for = PyUnicode_InternFromString("_tick_for");
    str_scheduled = PyUnicode_InternFromString("_scheduled");
    str_loop = PyUnicode_InternFromString("_loop");
    str_when = PyUnicode_InternFromString("_when");
    str_wheel = PyUnicode_InternFromString("_wheel");
    str_debug = PyUnicode_InternFromString("_debug");
    str_cancel_py = PyUnicode_InternFromString("_cancel_py");
    if (str_scheduled == NULL || str_loop == NULL || str_when == NULL || str_wheel == NULL
        || str_debug == NULL || str_cancel_py == NULL) {
        goto error;
    }
    if (str_wheel_tick == NULL || str_wheel_where == NULL || str_tick_for == NULL) {
        goto error;
    }
    for (int i = 0; i < NSLOTS + 2; i++) {
        where_objs[i] = PyLong_FromLong(i - 2);
        if (where_objs[i] == NULL) {
            goto error;
        }
    }
    low_bits_mask = PyLong_FromLongLong(((long long)1 << SPAN_BITS) - 1);
    ticks_per_second_obj = PyLong_FromLong(TICKS_PER_SECOND);
    if (low_bits_mask == NULL || ticks_per_second_obj == NULL) {
        goto error;
    }
    PyObject *math = PyImport_ImportModule("math");
    if (math == NULL) {
        goto error;
    }
    math_ceil = PyObject_GetAttrString(math, "ceil");
    Py_DECREF(math);
    if (math_ceil == NULL) {
        goto error;
    }
    PyObject *operator = PyImport_ImportModule("operator");
    if (operator == NULL) {
        goto error;
    }
    PyObject *getter = PyObject_CallMethod(operator, "attrgetter", "s", "_wheel_tick");
    Py_DECREF(operator);
    if (getter == NULL) {
        goto error;
    }
    sort_kwargs = Py_BuildValue("{s:N}", "key", getter);
    if (sort_kwargs == NULL) {
        goto error;
    }
    if (PyModule_AddObjectRef(m, "TimerWheel", (PyObject *)&Wheel_Type) < 0
        || PyModule_AddIntConstant(m, "NUM_LEVELS", NUM_LEVELS) < 0
        || PyModule_AddIntConstant(m, "SLOT_BITS", SLOT_BITS) < 0
        || PyModule_AddIntConstant(m, "PENDING", PENDING) < 0
        || PyModule_AddIntConstant(m, "UNFILED", UNFILED) < 0
        || PyModule_AddIntConstant(m, "TICKS_PER_SECOND", TICKS_PER_SECOND) < 0
        || PyModule_AddObject(m, "MAX_ELAPSED", PyLong_FromLongLong(MAX_ELAPSED)) < 0) {
        goto error;
    }
    return m;
error:
    Py_DECREF(m);
    return NULL;
}
