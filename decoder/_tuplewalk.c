/*
 * decoder._tuplewalk: the compiled form of the decoder's TupleData walk.
 *
 * Theory of operation
 * -------------------
 * Every row message of a stream is walked three times: validated when it arrives
 * (parser.row_message_is_valid), its tuples skipped when it is read back (parser.row_parts),
 * and its values converted by the sink's planner (values.load_tuple_wire, through
 * tupledata.walk_tuple). On CPython the loop over the columns was a fifth of the capture
 * path's CPU and a quarter of the planner's. This module runs that one loop (walk_part) in
 * C: without a list it only finds where the part ends; with one it appends each column's
 * value - its loader's result (the loaders stay Python callables, psycopg's), or the NULL or
 * unchanged-TOAST marker it is given.
 *
 * replay_rows is the replay loop's (decoder.replay.ReplayQueue._chunks): it turns a run of
 * plain row records of one relation - INSERT, or UPDATE with only a new tuple - into
 * RowChange objects over unsplit TupleData, built straight into their slots as
 * decoder.fastbuild builds them; the Python loop takes every other record and stays the
 * reference (tests/unit/decoder/test_replay_chunks.py replays both ways).
 *
 * absorb is the receive loop's bulk path (decoder.spill.FileChangeBuffer.absorb_frames):
 * it takes a run of XLogData frames holding row messages inside a transaction, checks each
 * message as row_message_is_valid does and appends its payload to the transaction's
 * in-memory records - what Assembler.feed does one frame at a time, which stays the
 * reference (tests/unit/decoder/test_bulk_frames.py feeds both ways).
 *
 * Four more functions serve the sink's columnar planner (sink/columnar.py): pick converts
 * only a row's identity columns, fold folds a run of plain inserts and updates by that
 * identity (the planner's inner loop: per change a few slot reads, pick and two dict
 * operations, no Python frame), gather lays the text values of many rows out column by
 * column in Arrow's binary layout, and columnar_meta lays out the rows' commit LSNs,
 * ordinals, commit times and delete flags as Arrow buffers. They have no Python twin:
 * without the kernel the planner converts rows one by one (its reference path), and they
 * answer None - or, for fold, stop at the change - for anything but text values and NULLs,
 * so the row path also raises every error (tests/unit/sink/test_columnar.py compares both
 * planners).
 *
 * The Python functions stay the reference (decoder/native.py picks one of the two forms at
 * import): both answer the same for every input (tests/unit/decoder/test_native.py compares
 * them on golden messages and on hypothesis-generated and damaged ones). Any failure here -
 * a part that does not fit, a loader that is missing or raises, an argument of another type
 * than the fast path takes - answers -1, None or False and never an error text: the caller
 * then runs the Python reference, which finds the same verdict and words the error with its
 * offset and message type.
 *
 * Wire format (logicalrep_write_tuple): Int16 column count, then per column a status byte:
 * 'n' NULL, 'u' unchanged TOAST (nothing follows), 't' text or 'b' binary followed by an
 * Int32 length and that many bytes. All integers big-endian.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static Py_ssize_t tuple_end_at(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos);

/* The same verdict as parser.row_message_is_valid (see there). */
static int
row_message_valid(const unsigned char *buf, Py_ssize_t len, int in_stream)
{
    Py_ssize_t pos = 5;
    if (len < 1) {
        return 0;
    }
    if (in_stream) {
        if (len < 5 || !(buf[1] | buf[2] | buf[3] | buf[4])) {
            return 0; /* xid 0: scan_row_message reports it */
        }
        pos = 9;
    }
    if (pos >= len) {
        return 0;
    }
    unsigned char tag = buf[0];
    unsigned char marker = buf[pos];
    if (tag == 'I') {
        if (marker != 'N') {
            return 0;
        }
    }
    else if (tag == 'U') {
        if (marker == 'K' || marker == 'O') {
            pos = tuple_end_at(buf, len, pos + 1);
            if (pos < 0 || pos >= len || buf[pos] != 'N') {
                return 0;
            }
        }
        else if (marker != 'N') {
            return 0;
        }
    }
    else if (tag == 'D') {
        if (marker != 'K' && marker != 'O') {
            return 0;
        }
    }
    else {
        return 0;
    }
    return tuple_end_at(buf, len, pos + 1) == len;
}

/* Borrow the bytes of ``obj``: bytes directly, anything else through the buffer protocol. */
static int
borrow(PyObject *obj, Py_buffer *view, const unsigned char **data, Py_ssize_t *len)
{
    if (PyBytes_CheckExact(obj)) {
        view->obj = NULL;
        *data = (const unsigned char *)PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    *data = (const unsigned char *)view->buf;
    *len = view->len;
    return 0;
}

static void
release(Py_buffer *view)
{
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

/* Item ``index`` of the loader sequence ``seq``, a new reference (a loader may change the
 * list it came from while it runs); NULL without an exception set when there is none. */
static PyObject *
loader_at(PyObject *seq, Py_ssize_t index)
{
    PyObject *item = NULL;
    if (PyList_CheckExact(seq)) {
        item = index < PyList_GET_SIZE(seq) ? PyList_GET_ITEM(seq, index) : NULL;
        Py_XINCREF(item);
        return item;
    }
    if (PyTuple_CheckExact(seq)) {
        item = index < PyTuple_GET_SIZE(seq) ? PyTuple_GET_ITEM(seq, index) : NULL;
        Py_XINCREF(item);
        return item;
    }
    item = PySequence_GetItem(seq, index);
    if (item == NULL) {
        PyErr_Clear();
    }
    return item;
}

/* One column's value: its loader called on a copy of its bytes. NULL (no exception set)
 * when the loader is missing or raised: the Python walk then does the column again. */
static PyObject *
load_value(PyObject *loaders, Py_ssize_t index, const unsigned char *data, Py_ssize_t size)
{
    PyObject *loader = loader_at(loaders, index);
    if (loader == NULL) {
        return NULL;
    }
    PyObject *value = NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)data, size);
    if (raw != NULL) {
        value = PyObject_CallOneArg(loader, raw);
        Py_DECREF(raw);
    }
    Py_DECREF(loader);
    if (value == NULL) {
        PyErr_Clear();
    }
    return value;
}

/* The one loop over a TupleData part's columns (tupledata.walk_tuple_reference's): the
 * offset after the part at buf[pos:], or -1 when it does not fit buf. With ``out`` (a list)
 * each column's value is appended - a loader's result, ``null`` or ``unchanged`` - and -1
 * also means a loader is missing or raised; without it (NULL) the walk only validates. */
static Py_ssize_t
walk_part(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, PyObject *out,
          PyObject *text, PyObject *binary, PyObject *null, PyObject *unchanged)
{
    if (pos < 0 || pos > len - 2) {
        return -1;
    }
    unsigned int count = ((unsigned int)buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    for (unsigned int i = 0; i < count; i++) {
        if (pos >= len) {
            return -1;
        }
        unsigned char kind = buf[pos];
        PyObject *value = NULL;
        if (kind == 't' || kind == 'b') {
            if (pos > len - 5) {
                return -1;
            }
            uint32_t size = ((uint32_t)buf[pos + 1] << 24) | ((uint32_t)buf[pos + 2] << 16)
                            | ((uint32_t)buf[pos + 3] << 8) | (uint32_t)buf[pos + 4];
            if ((uint64_t)size > (uint64_t)(len - pos - 5)) {
                return -1;
            }
            if (out != NULL) {
                value = load_value(kind == 't' ? text : binary, (Py_ssize_t)i, buf + pos + 5,
                                   (Py_ssize_t)size);
                if (value == NULL) {
                    return -1;
                }
            }
            pos += 5 + (Py_ssize_t)size;
        }
        else if (kind == 'n' || kind == 'u') {
            if (out != NULL) {
                value = kind == 'n' ? null : unchanged;
                Py_INCREF(value);
            }
            pos += 1;
        }
        else {
            return -1;
        }
        if (out != NULL) {
            int appended = PyList_Append(out, value);
            Py_DECREF(value);
            if (appended < 0) {
                PyErr_Clear();
                return -1;
            }
        }
    }
    return pos;
}

static Py_ssize_t
tuple_end_at(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos)
{
    return walk_part(buf, len, pos, NULL, NULL, NULL, NULL, NULL);
}

/* Every entry point's first check: it was given ``expected`` arguments. 0, or -1 with a
 * TypeError set. */
static int
argument_count(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes exactly %zd arguments", name, expected);
        return -1;
    }
    return 0;
}

/* The checks walk, load and pick start with: ``nargs`` is
 * ``expected``, args[1] is the start offset. 0, or -1 with an exception set. */
static int
start_argument(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
               Py_ssize_t *start)
{
    if (argument_count(name, nargs, expected) < 0) {
        return -1;
    }
    *start = PyLong_AsSsize_t(args[1]);
    return (*start == -1 && PyErr_Occurred()) ? -1 : 0;
}

PyDoc_STRVAR(walk_doc,
"walk(buf, start, out, text, binary, null, unchanged, /)\n--\n\n"
"tupledata.walk_tuple for a bytes buf and a list out (None only validates): the offset\n"
"after the TupleData part, or -1 when the part does not fit buf, a loader is missing or\n"
"raised, or buf is not bytes. On -1 out may hold some of the values and no exception is\n"
"set: the caller drops them and runs the Python walk, which raises the precise error.");

static PyObject *
walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("walk", args, nargs, 7, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    PyObject *out = args[2];
    if (!PyBytes_CheckExact(buf) || (out != Py_None && !PyList_CheckExact(out))) {
        return PyLong_FromSsize_t(-1);
    }
    return PyLong_FromSsize_t(walk_part((const unsigned char *)PyBytes_AS_STRING(buf),
                                        PyBytes_GET_SIZE(buf), start,
                                        out == Py_None ? NULL : out, args[3], args[4], args[5],
                                        args[6]));
}

PyDoc_STRVAR(load_doc,
"load(buf, start, text, binary, null, unchanged, /)\n--\n\n"
"values.load_tuple_wire_reference in one call: a new list of the part's values, or None\n"
"when the column count is not len(text) or walk would answer -1 (the caller then runs the\n"
"reference, which raises the precise error).");

static PyObject *
load(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("load", args, nargs, 6, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyBytes_CheckExact(buf)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    Py_ssize_t loaders = PyObject_Length(args[2]);
    if (loaders < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    if (start < 0 || start > len - 2
        || (Py_ssize_t)(((unsigned int)data[start] << 8) | data[start + 1]) != loaders) {
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    if (walk_part(data, len, start, out, args[2], args[3], args[4], args[5]) < 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

/* Offset and size of each of a part's ``count`` columns (size -1 for NULL), for a part
 * holding only text values and NULLs. The offset after the part, or -1 when the part does
 * not fit buf, its count is not ``count``, or a column is binary or unchanged TOAST. */
static Py_ssize_t
text_columns(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t count,
             Py_ssize_t *offsets, Py_ssize_t *sizes)
{
    if (pos < 0 || pos > len - 2
        || (Py_ssize_t)(((unsigned int)buf[pos] << 8) | buf[pos + 1]) != count) {
        return -1;
    }
    pos += 2;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pos >= len) {
            return -1;
        }
        if (buf[pos] == 'n') {
            sizes[i] = -1;
            pos += 1;
            continue;
        }
        if (buf[pos] != 't' || pos > len - 5) {
            return -1;
        }
        uint32_t size = ((uint32_t)buf[pos + 1] << 24) | ((uint32_t)buf[pos + 2] << 16)
                        | ((uint32_t)buf[pos + 3] << 8) | (uint32_t)buf[pos + 4];
        if ((uint64_t)size > (uint64_t)(len - pos - 5)) {
            return -1;
        }
        offsets[i] = pos + 5;
        sizes[i] = (Py_ssize_t)size;
        pos += 5 + (Py_ssize_t)size;
    }
    return pos;
}

/* A part as (bytes, start): 0 with the borrowed bytes, -1 (no exception) otherwise. */
static int
part_at(PyObject *part, const unsigned char **buf, Py_ssize_t *len, Py_ssize_t *start)
{
    if (!PyTuple_CheckExact(part) || PyTuple_GET_SIZE(part) != 2
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(part, 0))
        || !PyLong_CheckExact(PyTuple_GET_ITEM(part, 1))) {
        return -1;
    }
    PyObject *bytes = PyTuple_GET_ITEM(part, 0);
    *start = PyLong_AsSsize_t(PyTuple_GET_ITEM(part, 1));
    if (*start == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *buf = (const unsigned char *)PyBytes_AS_STRING(bytes);
    *len = PyBytes_GET_SIZE(bytes);
    return 0;
}

PyDoc_STRVAR(pick_doc,
"pick(buf, start, indexes, text, /)\n--\n\n"
"The values of the columns at indexes (a tuple of ints), each through its text loader,\n"
"None for NULL, as a tuple - for a TupleData part of len(text) columns that holds only\n"
"text values and NULLs. None when it does not: a binary or unchanged-TOAST column, a\n"
"part that does not fit, another column count, a loader that is missing or raises\n"
"(the caller then takes the general path, which raises the precise error).");

/* The identity values pick answers, for a part of ``count`` columns at data[start:]:
 * a new tuple, or a new reference to None when pick answers None. NULL only with an
 * exception set (out of memory). ``offsets`` and ``sizes`` hold ``count`` entries each. */
static PyObject *
pick_values(const unsigned char *data, Py_ssize_t len, Py_ssize_t start, PyObject *indexes,
            PyObject *text, Py_ssize_t count, Py_ssize_t *offsets, Py_ssize_t *sizes)
{
    if (text_columns(data, len, start, count, offsets, sizes) < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t wanted = PyTuple_GET_SIZE(indexes);
    PyObject *out = PyTuple_New(wanted);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < wanted; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(indexes, k));
        if (i < 0 || i >= count) {
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *value;
        if (sizes[i] < 0) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            value = load_value(text, i, data + offsets[i], sizes[i]);
            if (value == NULL) {
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
        }
        PyTuple_SET_ITEM(out, k, value);
    }
    return out;
}

static PyObject *
pick(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("pick", args, nargs, 4, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    PyObject *indexes = args[2];
    if (!PyBytes_CheckExact(buf) || !PyTuple_CheckExact(indexes)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyObject_Length(args[3]);
    if (count < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t *offsets = PyMem_New(Py_ssize_t, 2 * (size_t)(count + 1));
    if (offsets == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *out = pick_values((const unsigned char *)PyBytes_AS_STRING(buf),
                                PyBytes_GET_SIZE(buf), start, indexes, args[3], count, offsets,
                                offsets + count + 1);
    PyMem_Free(offsets);
    return out;
}

PyDoc_STRVAR(fold_doc,
"fold(changes, start, row_type, tuple_type, relation, timestamp, indexes, text, plain,\n"
"     rows, folded, parts, deletes, /)\n--\n\n"
"Fold the run of plain changes at changes[start:] into a merge step's columnar rows, and\n"
"answer (stop, inserts, updates, deletes): the index of the first change not folded and\n"
"how many of each were. A change is folded while it is a row_type instance of relation\n"
"(the same object), committed at timestamp, an insert or update without an old tuple or\n"
"a delete, whose tuple (the new one; a delete's old one) is unsplit (the wire of a\n"
"tuple_type), holds only text values and NULLs and has an identity - pick(..., indexes,\n"
"text) - of values whose types are in plain (a tuple of types). Folding one: an update\n"
"first removes its identity from rows; then rows[identity] = len(folded), and the change,\n"
"its tuple's wire and whether it deletes go to folded, parts and deletes. The first\n"
"change that is anything else stops the run, untouched: the caller plans it the general\n"
"way.");

/* Attribute names of RowChange and TupleData, interned once. */
static PyObject *name_relation, *name_old, *name_commit_time, *name_op, *name_new, *name_wire;
static PyObject *name_values, *name_buf, *name_start;
static PyObject *op_insert, *op_update, *op_delete, *old_kind_key, *old_kind_row;

static int
fold_names_ready(void)
{
    if (name_wire != NULL) {
        return 0;
    }
    name_relation = PyUnicode_InternFromString("relation");
    name_old = PyUnicode_InternFromString("old");
    name_commit_time = PyUnicode_InternFromString("commit_time");
    name_op = PyUnicode_InternFromString("op");
    name_new = PyUnicode_InternFromString("new");
    op_insert = PyUnicode_InternFromString("insert");
    op_update = PyUnicode_InternFromString("update");
    op_delete = PyUnicode_InternFromString("delete");
    old_kind_key = PyUnicode_InternFromString("K");
    old_kind_row = PyUnicode_InternFromString("O");
    name_values = PyUnicode_InternFromString("_values");
    name_buf = PyUnicode_InternFromString("_buf");
    name_start = PyUnicode_InternFromString("_start");
    name_wire = PyUnicode_InternFromString("wire");
    return (name_relation && name_old && name_commit_time && name_op && name_new && op_insert
            && op_update && op_delete && old_kind_key && old_kind_row && name_values && name_buf
            && name_start && name_wire)
               ? 0
               : -1;
}

/* How fold reads one attribute of a change: straight from its slot when the class
 * declares it in __slots__ (a member descriptor, as a frozen slots dataclass does), else
 * through getattr. */
typedef struct {
    PyObject *name;
    PyMemberDef *member;
} Field;

/* The slot definition behind ``descriptor`` (a class attribute), or NULL when it is not a
 * member descriptor (a ``__slots__`` entry). The class keeps both alive. */
static PyMemberDef *
slot_member(PyObject *descriptor)
{
    return Py_IS_TYPE(descriptor, &PyMemberDescr_Type)
               ? ((PyMemberDescrObject *)descriptor)->d_member
               : NULL;
}

static void
field_of(PyObject *type, PyObject *name, Field *field)
{
    field->name = name;
    field->member = NULL;
    PyObject *descriptor = PyObject_GetAttr(type, name);
    if (descriptor == NULL) {
        PyErr_Clear();
        return;
    }
    field->member = slot_member(descriptor);
    Py_DECREF(descriptor);
}

/* The attribute, a new reference; NULL with an exception set. */
static PyObject *
read_field(PyObject *obj, const Field *field)
{
    return field->member == NULL ? PyObject_GetAttr(obj, field->name)
                                 : PyMember_GetOne((const char *)obj, field->member);
}

enum { F_RELATION, F_OLD, F_COMMIT_TIME, F_OP, F_NEW, F_VALUES, F_BUF, F_START, FIELDS };

/* TupleData.wire of ``tuple`` (a new reference: None, or (bytes, start) of a tuple not yet
 * split), read from the slots the property reads when TupleData has them (fields[F_VALUES]
 * and on, looked up by fold), else through the property. NULL with an exception set. */
static PyObject *
unsplit_wire(PyObject *tuple, PyObject *tuple_type, const Field *fields)
{
    if (tuple == Py_None) {
        Py_RETURN_NONE;
    }
    if ((PyObject *)Py_TYPE(tuple) != tuple_type || fields[F_VALUES].member == NULL
        || fields[F_BUF].member == NULL || fields[F_START].member == NULL) {
        return PyObject_GetAttr(tuple, name_wire);
    }
    PyObject *values = read_field(tuple, &fields[F_VALUES]);
    if (values == NULL) {
        return NULL;
    }
    int split = values != Py_None;
    Py_DECREF(values);
    PyObject *buf = split ? (Py_INCREF(Py_None), Py_None) : read_field(tuple, &fields[F_BUF]);
    if (buf == NULL || buf == Py_None) {
        return buf;
    }
    PyObject *start = read_field(tuple, &fields[F_START]);
    PyObject *wire = start == NULL ? NULL : PyTuple_Pack(2, buf, start);
    Py_DECREF(buf);
    Py_XDECREF(start);
    return wire;
}

/* 1 when attribute ``field`` of ``obj`` is ``expected`` (identity), 0 when not, -1 on error. */
static int
attribute_is(PyObject *obj, const Field *field, PyObject *expected)
{
    PyObject *value = read_field(obj, field);
    if (value == NULL) {
        return -1;
    }
    int same = value == expected;
    Py_DECREF(value);
    return same;
}

/* 1 when every value of ``identity`` (a tuple) has exactly one of the types in ``plain``. */
static int
plainly_hashable(PyObject *identity, PyObject *plain)
{
    Py_ssize_t types = PyTuple_GET_SIZE(plain);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(identity); k++) {
        PyObject *type = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(identity, k));
        Py_ssize_t t = 0;
        while (t < types && PyTuple_GET_ITEM(plain, t) != type) {
            t++;
        }
        if (t == types) {
            return 0;
        }
    }
    return 1;
}

/* Fold ``change`` (see fold_doc): 1 folded as an insert, 2 as an update, 0 when it is not
 * plain (nothing changed), -1 on an error (an exception is set). */
static int
fold_one(PyObject *change, PyObject *const *args, const Field *fields, Py_ssize_t count,
         Py_ssize_t *offsets)
{
    PyObject *row_type = args[2], *tuple_type = args[3], *relation = args[4];
    PyObject *timestamp = args[5], *indexes = args[6], *text = args[7], *plain = args[8];
    PyObject *rows = args[9], *folded = args[10], *parts = args[11], *deletes = args[12];
    if ((PyObject *)Py_TYPE(change) != row_type) {
        return 0;
    }
    int same = attribute_is(change, &fields[F_RELATION], relation);
    if (same <= 0) {
        return same;
    }
    PyObject *value = read_field(change, &fields[F_COMMIT_TIME]);
    if (value == NULL) {
        return -1;
    }
    same = value == timestamp ? 1 : PyObject_RichCompareBool(value, timestamp, Py_EQ);
    Py_DECREF(value);
    if (same <= 0) {
        return same;
    }
    PyObject *op = read_field(change, &fields[F_OP]);
    if (op == NULL) {
        return -1;
    }
    int kind = 0;
    if (PyUnicode_Check(op)) {
        kind = (op == op_insert || PyUnicode_Compare(op, op_insert) == 0)   ? 1
               : (op == op_update || PyUnicode_Compare(op, op_update) == 0) ? 2
               : (op == op_delete || PyUnicode_Compare(op, op_delete) == 0) ? 3
                                                                            : 0;
    }
    Py_DECREF(op);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (kind == 0) {
        return 0;
    }
    /* An insert or update without an old tuple folds its new tuple, a delete its old one. */
    PyObject *old = read_field(change, &fields[F_OLD]);
    if (old == NULL) {
        return -1;
    }
    if ((old != Py_None) != (kind == 3)) { /* an update with an old tuple: the row path's */
        Py_DECREF(old);
        return 0;
    }
    PyObject *tuple = old; /* a delete's */
    if (kind != 3) {
        Py_DECREF(old); /* None */
        tuple = read_field(change, &fields[F_NEW]);
        if (tuple == NULL) {
            return -1;
        }
    }
    PyObject *wire = unsplit_wire(tuple, tuple_type, fields);
    Py_DECREF(tuple);
    if (wire == NULL) {
        return -1;
    }
    const unsigned char *buf;
    Py_ssize_t len, start;
    if (part_at(wire, &buf, &len, &start) < 0) {
        Py_DECREF(wire);
        return 0;
    }
    PyObject *identity = pick_values(buf, len, start, indexes, text, count, offsets,
                                     offsets + count + 1);
    if (identity == NULL || identity == Py_None || !plainly_hashable(identity, plain)) {
        Py_XDECREF(identity);
        Py_DECREF(wire);
        return identity == NULL ? -1 : 0;
    }
    /* As the row path: an insert or delete takes its identity's place, an update moves it
     * last. */
    int result = kind;
    if (kind == 2 && PyDict_DelItem(rows, identity) < 0) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
        }
        else {
            result = -1;
        }
    }
    PyObject *index = result < 0 ? NULL : PyLong_FromSsize_t(PyList_GET_SIZE(folded));
    if (index == NULL || PyDict_SetItem(rows, identity, index) < 0
        || PyList_Append(folded, change) < 0 || PyList_Append(parts, wire) < 0
        || PyList_Append(deletes, kind == 3 ? Py_True : Py_False) < 0) {
        result = -1;
    }
    Py_XDECREF(index);
    Py_DECREF(identity);
    Py_DECREF(wire);
    return result;
}

static PyObject *
fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("fold", args, nargs, 13, &start) < 0 || fold_names_ready() < 0) {
        return NULL;
    }
    PyObject *changes = args[0];
    if (!(PyList_CheckExact(changes) || PyTuple_CheckExact(changes))
        || !PyType_Check(args[2]) || !PyType_Check(args[3]) || !PyTuple_CheckExact(args[6])
        || !PyTuple_CheckExact(args[8]) || !PyDict_CheckExact(args[9])
        || !PyList_CheckExact(args[10]) || !PyList_CheckExact(args[11])
        || !PyList_CheckExact(args[12])) {
        PyErr_SetString(PyExc_TypeError,
                        "fold takes a list or tuple of changes, two types, tuples of indexes "
                        "and of types, a dict and three lists");
        return NULL;
    }
    Py_ssize_t count = PyObject_Length(args[7]);
    if (count < 0) {
        return NULL;
    }
    Py_ssize_t *offsets = PyMem_New(Py_ssize_t, 2 * (size_t)(count + 1));
    if (offsets == NULL) {
        return PyErr_NoMemory();
    }
    Field fields[FIELDS];
    field_of(args[2], name_relation, &fields[F_RELATION]);
    field_of(args[2], name_old, &fields[F_OLD]);
    field_of(args[2], name_commit_time, &fields[F_COMMIT_TIME]);
    field_of(args[2], name_op, &fields[F_OP]);
    field_of(args[2], name_new, &fields[F_NEW]);
    field_of(args[3], name_values, &fields[F_VALUES]);
    field_of(args[3], name_buf, &fields[F_BUF]);
    field_of(args[3], name_start, &fields[F_START]);
    Py_ssize_t folded[4] = {0, 0, 0, 0};
    Py_ssize_t at = start < 0 ? 0 : start;
    /* the same macros read a list and a tuple; a list's size is read again every time */
    while (at < PySequence_Fast_GET_SIZE(changes)) {
        PyObject *change = PySequence_Fast_GET_ITEM(changes, at);
        Py_INCREF(change);
        int kind = fold_one(change, args, fields, count, offsets);
        Py_DECREF(change);
        if (kind < 0) {
            PyMem_Free(offsets);
            return NULL;
        }
        if (kind == 0) {
            break;
        }
        folded[kind]++;
        at++;
    }
    PyMem_Free(offsets);
    return Py_BuildValue("(nnnn)", at, folded[1], folded[2], folded[3]);
}

PyDoc_STRVAR(gather_doc,
"gather(parts, count, /)\n--\n\n"
"The text values of TupleData parts, column by column, in Arrow's binary layout: for\n"
"each of the count columns a tuple (offsets, data, validity, null_count) - int32 offsets\n"
"in native order, the values' bytes end to end, a validity bitmap (None without NULLs)\n"
"and the number of NULLs. parts is a list of (bytes, start) tuples. None when a part is\n"
"not such a tuple, does not fit, has another column count or a binary or\n"
"unchanged-TOAST column, or a column's bytes exceed 2 GiB.");

static PyObject *
gather(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("gather", nargs, 2) < 0) {
        return NULL;
    }
    PyObject *parts = args[0];
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_CheckExact(parts) || count < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t rows = PyList_GET_SIZE(parts);
    /* offsets and sizes of one part's columns, then per column its total and NULL count */
    Py_ssize_t *work = PyMem_New(Py_ssize_t, 4 * (size_t)(count + 1));
    if (work == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t *offsets = work, *sizes = work + count + 1;
    Py_ssize_t *totals = sizes + count + 1, *nulls = totals + count + 1;
    PyObject *result = NULL, *columns = NULL;
    PyObject **offset_bytes = NULL, **data_bytes = NULL, **valid_bytes = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        totals[i] = 0;
        nulls[i] = 0;
    }
    const unsigned char *buf;
    Py_ssize_t len, start;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (part_at(PyList_GET_ITEM(parts, r), &buf, &len, &start) < 0
            || text_columns(buf, len, start, count, offsets, sizes) < 0) {
            goto none;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (sizes[i] < 0) {
                nulls[i]++;
            }
            else {
                totals[i] += sizes[i];
                if (totals[i] > INT32_MAX) {
                    goto none;
                }
            }
        }
    }
    columns = PyList_New(count);
    offset_bytes = PyMem_New(PyObject *, 3 * (size_t)(count + 1));
    if (columns == NULL || offset_bytes == NULL) {
        if (offset_bytes == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    data_bytes = offset_bytes + count + 1;
    valid_bytes = data_bytes + count + 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        offset_bytes[i] = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
        data_bytes[i] = PyBytes_FromStringAndSize(NULL, totals[i]);
        valid_bytes[i] = nulls[i] ? PyBytes_FromStringAndSize(NULL, (rows + 7) / 8) : Py_None;
        if (valid_bytes[i] == Py_None) {
            Py_INCREF(Py_None);
        }
        if (!offset_bytes[i] || !data_bytes[i] || !valid_bytes[i]) {
            Py_XDECREF(offset_bytes[i]);
            Py_XDECREF(data_bytes[i]);
            Py_XDECREF(valid_bytes[i]);
            goto fail;
        }
        /* "N" hands the three references to the tuple, also when building it fails */
        PyObject *column = Py_BuildValue("(NNNn)", offset_bytes[i], data_bytes[i],
                                         valid_bytes[i], nulls[i]);
        if (column == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(columns, i, column); /* the tuple owns the three buffers now */
        ((int32_t *)PyBytes_AS_STRING(offset_bytes[i]))[0] = 0;
        if (nulls[i]) {
            memset(PyBytes_AS_STRING(valid_bytes[i]), 0, (size_t)((rows + 7) / 8));
        }
        totals[i] = 0; /* from here: bytes written so far */
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        /* the parts are immutable bytes: this walk finds what the first one did */
        part_at(PyList_GET_ITEM(parts, r), &buf, &len, &start);
        text_columns(buf, len, start, count, offsets, sizes);
        for (Py_ssize_t i = 0; i < count; i++) {
            if (sizes[i] >= 0) {
                memcpy(PyBytes_AS_STRING(data_bytes[i]) + totals[i], buf + offsets[i],
                       (size_t)sizes[i]);
                totals[i] += sizes[i];
                if (nulls[i]) {
                    ((unsigned char *)PyBytes_AS_STRING(valid_bytes[i]))[r / 8] |=
                        (unsigned char)(1u << (r % 8));
                }
            }
            ((int32_t *)PyBytes_AS_STRING(offset_bytes[i]))[r + 1] = (int32_t)totals[i];
        }
    }
    result = columns;
    columns = NULL;
fail:
    Py_XDECREF(columns);
    PyMem_Free(offset_bytes);
    PyMem_Free(work);
    return result;
none:
    PyMem_Free(work);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(replay_rows_doc,
"replay_rows(records, relations, relation, row_type, tuple_type, id_at, commit_lsn,\n"
"            commit_time, xid, ordinal, chunk, weight, max_changes, max_weight, overhead,\n"
"            /)\n--\n\n"
"Replay the run of plain row records next in the iterator records into chunk: each an\n"
"INSERT, an UPDATE with only its new tuple, or a DELETE, of relation (relations[id] is\n"
"relation, the id read at id_at). An INSERT or UPDATE becomes row_type(op, relation,\n"
"new, None, None, commit_lsn, commit_time, ordinal, xid) with new a tuple_type over the\n"
"record's unsplit tuple, a DELETE row_type('delete', relation, None, old, kind, ...)\n"
"with old that tuple and kind its marker ('K' or 'O'), as replay.ReplayQueue._chunks\n"
"builds them, ordinal counting up, weight growing by overhead + len(record). The run\n"
"ends after the change that makes chunk max_changes long or its weight max_weight\n"
"(negative: no limit), at the first record that is not such a row, or when records\n"
"ends. Answers (ordinal, weight, inserts, updates, deletes, record): record is the\n"
"record read and not replayed (the caller replays it), or None when none was read past\n"
"the run.");

/* Members of RowChange, in its constructor's order, and of a wire TupleData. */
static const char *const change_fields[] = {"op",          "relation", "new",     "old", "old_kind",
                                            "commit_lsn",  "commit_time", "ordinal", "xid"};
enum { C_OP, C_RELATION, C_NEW, C_OLD, C_OLD_KIND, C_COMMIT_LSN, C_COMMIT_TIME, C_ORDINAL, C_XID,
       CHANGE_FIELDS };
static const char *const tuple_fields[] = {"_buf", "_start", "_values"};
enum { T_BUF, T_START, T_VALUES, TUPLE_FIELDS };

/* The member definitions of ``names`` in ``type``; -1 with a TypeError when one is not a
 * slot (the caller's classes are frozen slots dataclasses). */
static int
members_of(PyObject *type, const char *const *names, int count, PyMemberDef **members)
{
    for (int i = 0; i < count; i++) {
        PyObject *descriptor = PyObject_GetAttrString(type, names[i]);
        if (descriptor == NULL) {
            return -1;
        }
        members[i] = slot_member(descriptor);
        Py_DECREF(descriptor);
        if (members[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%R.%s is not a slot", type, names[i]);
            return -1;
        }
    }
    return 0;
}

/* ``members_of`` remembered for one type: replay_rows runs once per run of rows, and a
 * DELETE or a schema record ends a run, so looking the slots up on every call cost as much
 * as replaying a short run. The cache holds a reference to its type, so the pointer it
 * compares cannot be reused by another type. */
typedef struct {
    PyObject *type;
    PyMemberDef *members[CHANGE_FIELDS];
} MemberCache;

static int
cached_members_of(MemberCache *cache, PyObject *type, const char *const *names, int count,
                  PyMemberDef **members)
{
    if (cache->type != type) {
        /* Into the caller's array first: a failed lookup leaves the cache as it was. */
        if (members_of(type, names, count, members) < 0) {
            return -1;
        }
        memcpy(cache->members, members, sizeof(PyMemberDef *) * (size_t)count);
        Py_INCREF(type);
        Py_XSETREF(cache->type, type);
        return 0;
    }
    memcpy(members, cache->members, sizeof(PyMemberDef *) * (size_t)count);
    return 0;
}

/* A new instance of ``type`` with ``values`` in its slots, without its constructor (as
 * decoder.fastbuild builds one). NULL with an exception set. */
static PyObject *
new_slotted(PyTypeObject *type, PyMemberDef **members, PyObject **values, int count)
{
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) {
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        if (PyMember_SetOne((char *)obj, members[i], values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

static PyObject *
replay_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("replay_rows", nargs, 15) < 0) {
        return NULL;
    }
    PyObject *records = args[0], *relations = args[1], *relation = args[2];
    PyObject *row_type = args[3], *tuple_type = args[4], *chunk = args[10];
    if (!PyIter_Check(records) || !PyDict_CheckExact(relations) || !PyType_Check(row_type)
        || !PyType_Check(tuple_type) || !PyList_CheckExact(chunk)) {
        PyErr_SetString(PyExc_TypeError,
                        "replay_rows takes an iterator, a dict, a relation, two types and a list");
        return NULL;
    }
    Py_ssize_t id_at = PyLong_AsSsize_t(args[5]);
    Py_ssize_t ordinal = PyLong_AsSsize_t(args[9]);
    Py_ssize_t weight = PyLong_AsSsize_t(args[11]);
    Py_ssize_t max_changes = PyLong_AsSsize_t(args[12]);
    Py_ssize_t max_weight = PyLong_AsSsize_t(args[13]);
    Py_ssize_t overhead = PyLong_AsSsize_t(args[14]);
    if (PyErr_Occurred() || fold_names_ready() < 0) {
        return NULL;
    }
    static MemberCache change_cache, tuple_cache;
    PyMemberDef *change_members[CHANGE_FIELDS], *tuple_members[TUPLE_FIELDS];
    if (cached_members_of(&change_cache, row_type, change_fields, CHANGE_FIELDS, change_members)
            < 0
        || cached_members_of(&tuple_cache, tuple_type, tuple_fields, TUPLE_FIELDS, tuple_members)
               < 0) {
        return NULL;
    }
    Py_ssize_t tuple_at = id_at + 5; /* relation id, then the 'N', 'K' or 'O' marker */
    PyObject *start = PyLong_FromSsize_t(tuple_at);
    if (start == NULL) {
        return NULL;
    }
    Py_ssize_t taken[3] = {0, 0, 0};
    PyObject *left = NULL; /* a record read and not replayed */
    for (;;) {
        if (PyList_GET_SIZE(chunk) >= max_changes || (max_weight >= 0 && weight >= max_weight)) {
            break;
        }
        PyObject *record = PyIter_Next(records);
        if (record == NULL) {
            if (PyErr_Occurred()) {
                goto fail; /* reading the buffer failed: the error propagates */
            }
            break;
        }
        const unsigned char *data;
        Py_ssize_t len;
        int kind = -1;
        if (PyBytes_CheckExact(record) && (len = PyBytes_GET_SIZE(record)) > tuple_at) {
            data = (const unsigned char *)PyBytes_AS_STRING(record);
            if (data[0] == 'I') {
                kind = 0;
            }
            else if (data[0] == 'U' && data[id_at + 4] == 'N') {
                kind = 1;
            }
            else if (data[0] == 'D' && (data[id_at + 4] == 'K' || data[id_at + 4] == 'O')) {
                kind = 2;
            }
        }
        PyObject *id = NULL;
        if (kind >= 0) {
            uint32_t value = ((uint32_t)data[id_at] << 24) | ((uint32_t)data[id_at + 1] << 16)
                             | ((uint32_t)data[id_at + 2] << 8) | (uint32_t)data[id_at + 3];
            id = PyLong_FromUnsignedLong(value);
            if (id == NULL) {
                Py_DECREF(record);
                goto fail;
            }
        }
        if (kind < 0 || PyDict_GetItemWithError(relations, id) != relation) {
            Py_XDECREF(id);
            if (PyErr_Occurred()) {
                Py_DECREF(record);
                goto fail;
            }
            left = record;
            break;
        }
        Py_DECREF(id);
        PyObject *tuple_values[TUPLE_FIELDS] = {record, start, Py_None};
        PyObject *tuple = new_slotted((PyTypeObject *)tuple_type, tuple_members, tuple_values,
                                      TUPLE_FIELDS);
        PyObject *number = tuple == NULL ? NULL : PyLong_FromSsize_t(ordinal);
        PyObject *change = NULL;
        if (number != NULL) {
            PyObject *change_values[CHANGE_FIELDS] = {
                op_insert, relation, tuple, Py_None, Py_None, args[6], args[7], number, args[8]};
            if (kind == 1) {
                change_values[C_OP] = op_update;
            }
            else if (kind == 2) {
                /* A DELETE's tuple is its old key ('K') or old row ('O'). */
                change_values[C_OP] = op_delete;
                change_values[C_NEW] = Py_None;
                change_values[C_OLD] = tuple;
                change_values[C_OLD_KIND] = data[id_at + 4] == 'K' ? old_kind_key : old_kind_row;
            }
            change = new_slotted((PyTypeObject *)row_type, change_members, change_values,
                                 CHANGE_FIELDS);
        }
        Py_XDECREF(number);
        Py_XDECREF(tuple);
        int appended = change == NULL ? -1 : PyList_Append(chunk, change);
        Py_XDECREF(change);
        if (appended < 0) {
            Py_DECREF(record);
            goto fail;
        }
        weight += overhead + len;
        ordinal++;
        taken[kind]++;
        Py_DECREF(record);
    }
    Py_DECREF(start);
    return Py_BuildValue("(nnnnnN)", ordinal, weight, taken[0], taken[1], taken[2],
                         left == NULL ? (Py_INCREF(Py_None), Py_None) : left);
fail:
    Py_DECREF(start);
    return NULL;
}

PyDoc_STRVAR(absorb_doc,
"absorb(frames, start, records, room, overhead, /)\n--\n\n"
"Take the run of row messages at frames[start:] into a transaction's in-memory records:\n"
"the receive loop's bulk, for a transaction open outside a stream block. A frame belongs\n"
"to the run while it is bytes holding an XLogData frame ('w', 24 header bytes) whose\n"
"payload row_message_is_valid(payload, False) accepts and fits the room left: each takes\n"
"len(payload) + overhead bytes of room. Each payload is appended to records (a list) as\n"
"bytes; with records None the run is only checked and counted. Answers (stop, used,\n"
"payload_bytes, wal_start, inserts, updates, deletes): the index of the first frame not\n"
"taken (untouched: the caller feeds it the general way),\n"
"the room used, the payloads' total length, the WAL start of the last frame taken (0\n"
"when none was) and how many of each row message were taken.");

/* The offset of an XLogData frame's payload: 'w', then start LSN, end LSN, send time. */
#define XLOG_PAYLOAD 25

static PyObject *
absorb(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("absorb", args, nargs, 5, &start) < 0) {
        return NULL;
    }
    PyObject *frames = args[0], *records = args[2];
    if (!PyList_CheckExact(frames) || !(records == Py_None || PyList_CheckExact(records))) {
        PyErr_SetString(PyExc_TypeError,
                        "absorb takes a list of frames and a list of records or None");
        return NULL;
    }
    Py_ssize_t room = PyLong_AsSsize_t(args[3]);
    if (room == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t overhead = PyLong_AsSsize_t(args[4]);
    if (overhead == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t used = 0, payload_bytes = 0, taken[3] = {0, 0, 0};
    unsigned long long wal_start = 0;
    Py_ssize_t at = start < 0 ? 0 : start;
    for (; at < PyList_GET_SIZE(frames); at++) {
        PyObject *frame = PyList_GET_ITEM(frames, at);
        if (!PyBytes_CheckExact(frame) || PyBytes_GET_SIZE(frame) <= XLOG_PAYLOAD) {
            break;
        }
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(frame);
        Py_ssize_t size = PyBytes_GET_SIZE(frame) - XLOG_PAYLOAD;
        const unsigned char *payload = data + XLOG_PAYLOAD;
        if (data[0] != 'w' || size + overhead > room - used
            || !row_message_valid(payload, size, 0)) {
            break;
        }
        if (records != Py_None) {
            PyObject *record = PyBytes_FromStringAndSize((const char *)payload, size);
            if (record == NULL) {
                return NULL;
            }
            int appended = PyList_Append(records, record);
            Py_DECREF(record);
            if (appended < 0) {
                return NULL;
            }
        }
        used += size + overhead;
        payload_bytes += size;
        taken[payload[0] == 'I' ? 0 : payload[0] == 'U' ? 1 : 2]++;
        wal_start = 0;
        for (int i = 1; i <= 8; i++) {
            wal_start = (wal_start << 8) | data[i];
        }
    }
    return Py_BuildValue("(nnnKnnn)", at, used, payload_bytes, wal_start, taken[0], taken[1],
                         taken[2]);
}

PyDoc_STRVAR(xlog_records_doc,
"xlog_records(frames, start, stop, out, /)\n--\n\n"
"Append to out (a list) one recording record per XLogData frame of frames[start:stop]:\n"
"the frame's start LSN (8 bytes), its payload length (4 bytes, both big-endian) and the\n"
"payload - the record daemon.recording writes. A ValueError for a frame that is not an\n"
"XLogData frame (the caller hands only frames absorb took).");

static PyObject *
xlog_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("xlog_records", args, nargs, 4, &start) < 0) {
        return NULL;
    }
    PyObject *frames = args[0], *out = args[3];
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    if (stop == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_CheckExact(frames) || !PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "xlog_records takes a list of frames and a list");
        return NULL;
    }
    if (start < 0 || stop > PyList_GET_SIZE(frames)) {
        PyErr_SetString(PyExc_IndexError, "xlog_records: start or stop outside the frames");
        return NULL;
    }
    for (Py_ssize_t at = start; at < stop; at++) {
        PyObject *frame = PyList_GET_ITEM(frames, at);
        if (!PyBytes_CheckExact(frame) || PyBytes_GET_SIZE(frame) < XLOG_PAYLOAD
            || PyBytes_AS_STRING(frame)[0] != 'w') {
            PyErr_Format(PyExc_ValueError, "frame %zd is not an XLogData frame", at);
            return NULL;
        }
        Py_ssize_t size = PyBytes_GET_SIZE(frame) - XLOG_PAYLOAD;
        if (size > (Py_ssize_t)UINT32_MAX) {
            PyErr_Format(PyExc_ValueError, "frame %zd holds more than 4 GiB", at);
            return NULL;
        }
        PyObject *record = PyBytes_FromStringAndSize(NULL, 12 + size);
        if (record == NULL) {
            return NULL;
        }
        unsigned char *to = (unsigned char *)PyBytes_AS_STRING(record);
        const unsigned char *from = (const unsigned char *)PyBytes_AS_STRING(frame);
        memcpy(to, from + 1, 8); /* the start LSN, big-endian already */
        to[8] = (unsigned char)(size >> 24);
        to[9] = (unsigned char)(size >> 16);
        to[10] = (unsigned char)(size >> 8);
        to[11] = (unsigned char)size;
        memcpy(to + 12, from + XLOG_PAYLOAD, (size_t)size);
        int appended = PyList_Append(out, record);
        Py_DECREF(record);
        if (appended < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(columnar_meta_doc,
"columnar_meta(rows, changes, deletes, row_type, /)\n--\n\n"
"The metadata columns of a merge step's columnar rows (sink.plan._freeze_step). rows\n"
"iterates the step's row entries: an int is the index in changes (a list of row_type\n"
"objects) of a columnar row, anything else a row planned the general way. Answers\n"
"(others, live, lsns, ordinals, micros, deletes): the other entries, in order; the\n"
"columnar indexes in ascending order as native int64 bytes, or None when every change is\n"
"one; then per such index, in that order, the change's commit_lsn and ordinal as native\n"
"int64 bytes, its commit_time as int64 microseconds since the Unix epoch, and\n"
"deletes[index] as an Arrow bitmap.");

/* Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC). */
#define UNIX_TO_PG_EPOCH_MICROS INT64_C(946684800000000)

/* The value in ``obj``'s slot ``member`` as an int64; -1 with an exception set on failure
 * (check PyErr_Occurred). */
static int64_t
slot_int64(PyObject *obj, PyMemberDef *member)
{
    PyObject *value = PyMember_GetOne((const char *)obj, member);
    if (value == NULL) {
        return -1;
    }
    long long out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (int64_t)out;
}

static PyObject *
columnar_meta(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("columnar_meta", nargs, 4) < 0) {
        return NULL;
    }
    PyObject *changes = args[1], *deletes = args[2], *row_type = args[3];
    if (!PyList_CheckExact(changes) || !PyList_CheckExact(deletes) || !PyType_Check(row_type)
        || PyList_GET_SIZE(deletes) != PyList_GET_SIZE(changes)) {
        PyErr_SetString(PyExc_TypeError,
                        "columnar_meta takes an iterable, two lists of one length and a type");
        return NULL;
    }
    static const char *const names[] = {"commit_lsn", "ordinal", "commit_time"};
    PyMemberDef *members[3];
    if (members_of(row_type, names, 3, members) < 0) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(changes);
    PyObject *others = PyList_New(0), *iterator = PyObject_GetIter(args[0]);
    unsigned char *seen = PyMem_Calloc((size_t)n / 8 + 1, 1);
    PyObject *live = NULL, *lsns = NULL, *ordinals = NULL, *micros = NULL, *bitmap = NULL;
    if (others == NULL || iterator == NULL || seen == NULL) {
        if (seen == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    Py_ssize_t count = 0;
    PyObject *entry;
    while ((entry = PyIter_Next(iterator)) != NULL) {
        if (!PyLong_CheckExact(entry)) {
            int appended = PyList_Append(others, entry);
            Py_DECREF(entry);
            if (appended < 0) {
                goto fail;
            }
            continue;
        }
        Py_ssize_t index = PyLong_AsSsize_t(entry);
        Py_DECREF(entry);
        if (index < 0 || index >= n || (seen[index / 8] >> (index % 8)) & 1) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError,
                             "columnar row index %zd is out of range or repeated", index);
            }
            goto fail;
        }
        seen[index / 8] |= (unsigned char)(1 << (index % 8));
        count++;
    }
    if (PyErr_Occurred()) {
        goto fail;
    }
    Py_ssize_t size = count * (Py_ssize_t)sizeof(int64_t);
    lsns = PyBytes_FromStringAndSize(NULL, size);
    ordinals = PyBytes_FromStringAndSize(NULL, size);
    micros = PyBytes_FromStringAndSize(NULL, size);
    bitmap = PyBytes_FromStringAndSize(NULL, (count + 7) / 8);
    if (count < n) {
        live = PyBytes_FromStringAndSize(NULL, size);
    }
    else {
        live = Py_NewRef(Py_None);
    }
    if (lsns == NULL || ordinals == NULL || micros == NULL || bitmap == NULL || live == NULL) {
        goto fail;
    }
    memset(PyBytes_AS_STRING(bitmap), 0, (size_t)(count + 7) / 8);
    int64_t *live_out = live == Py_None ? NULL : (int64_t *)PyBytes_AS_STRING(live);
    int64_t *lsn_out = (int64_t *)PyBytes_AS_STRING(lsns);
    int64_t *ordinal_out = (int64_t *)PyBytes_AS_STRING(ordinals);
    int64_t *micros_out = (int64_t *)PyBytes_AS_STRING(micros);
    unsigned char *delete_out = (unsigned char *)PyBytes_AS_STRING(bitmap);
    Py_ssize_t row = 0;
    for (Py_ssize_t index = 0; index < n; index++) {
        if (!((seen[index / 8] >> (index % 8)) & 1)) {
            continue;
        }
        PyObject *change = PyList_GET_ITEM(changes, index);
        if ((PyObject *)Py_TYPE(change) != row_type) {
            PyErr_Format(PyExc_TypeError, "columnar change %zd is not a %R", index, row_type);
            goto fail;
        }
        int64_t time = slot_int64(change, members[2]);
        if (PyErr_Occurred() || (lsn_out[row] = slot_int64(change, members[0]), PyErr_Occurred())
            || (ordinal_out[row] = slot_int64(change, members[1]), PyErr_Occurred())) {
            goto fail;
        }
        if (__builtin_add_overflow(time, UNIX_TO_PG_EPOCH_MICROS, &micros_out[row])) {
            PyErr_SetString(PyExc_OverflowError, "commit time out of range");
            goto fail;
        }
        int deleted = PyObject_IsTrue(PyList_GET_ITEM(deletes, index));
        if (deleted < 0) {
            goto fail;
        }
        if (deleted) {
            delete_out[row / 8] |= (unsigned char)(1 << (row % 8));
        }
        if (live_out != NULL) {
            live_out[row] = index;
        }
        row++;
    }
    PyMem_Free(seen);
    Py_DECREF(iterator);
    return Py_BuildValue("(NNNNNN)", others, live, lsns, ordinals, micros, bitmap);
fail:
    PyMem_Free(seen);
    Py_XDECREF(iterator);
    Py_XDECREF(others);
    Py_XDECREF(live);
    Py_XDECREF(lsns);
    Py_XDECREF(ordinals);
    Py_XDECREF(micros);
    Py_XDECREF(bitmap);
    return NULL;
}

PyDoc_STRVAR(row_message_is_valid_doc,
"row_message_is_valid(buf, in_stream, /)\n--\n\n"
"True when buf is an INSERT, UPDATE or DELETE that scan_row_message accepts; False means\n"
"\"not proven here\" (see decoder.parser.row_message_is_valid).");

static PyObject *
row_message_is_valid(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("row_message_is_valid", nargs, 2) < 0) {
        return NULL;
    }
    int in_stream = PyObject_IsTrue(args[1]);
    if (in_stream < 0) {
        return NULL;
    }
    Py_buffer view;
    const unsigned char *data;
    Py_ssize_t len;
    if (borrow(args[0], &view, &data, &len) < 0) {
        return NULL;
    }
    int valid = row_message_valid(data, len, in_stream);
    release(&view);
    return PyBool_FromLong(valid);
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL, walk_doc},
    {"load", (PyCFunction)(void (*)(void))load, METH_FASTCALL, load_doc},
    {"pick", (PyCFunction)(void (*)(void))pick, METH_FASTCALL, pick_doc},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL, gather_doc},
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, fold_doc},
    {"absorb", (PyCFunction)(void (*)(void))absorb, METH_FASTCALL, absorb_doc},
    {"xlog_records", (PyCFunction)(void (*)(void))xlog_records, METH_FASTCALL, xlog_records_doc},
    {"replay_rows", (PyCFunction)(void (*)(void))replay_rows, METH_FASTCALL, replay_rows_doc},
    {"columnar_meta", (PyCFunction)(void (*)(void))columnar_meta, METH_FASTCALL,
     columnar_meta_doc},
    {"row_message_is_valid", (PyCFunction)(void (*)(void))row_message_is_valid, METH_FASTCALL,
     row_message_is_valid_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "decoder._tuplewalk",
    "The decoder's validating TupleData walk, compiled (see decoder.kernel).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__tuplewalk(void)
{
    return PyModuleDef_Init(&module_def);
}
