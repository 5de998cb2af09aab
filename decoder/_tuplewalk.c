/*
 * decoder._tuplewalk: the compiled form of the decoder's TupleData walk.
 *
 * Theory of operation
 * -------------------
 * A row message is walked once per layer: validated when it arrives
 * (parser.row_message_is_valid) and converted by the sink (values.load_tuple_wire, through
 * tupledata.walk_tuple, or sink/planning/_columnar.c); an UPDATE with an old tuple is skipped over
 * once more when read back (parser.row_parts). Why not once in all:
 * docs/decisions/0102-a-tupledata-is-walked-once-per-layer.md. On CPython the loop over the columns was a fifth of the capture
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
 * The sink's columnar planner has a kernel of its own (sink/planning/_columnar.c); the TupleData
 * wire helpers both use are in decoder/_tuplewire.h.
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
#include "_tuplewire.h"


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
    {"absorb", (PyCFunction)(void (*)(void))absorb, METH_FASTCALL, absorb_doc},
    {"xlog_records", (PyCFunction)(void (*)(void))xlog_records, METH_FASTCALL, xlog_records_doc},
    {"replay_rows", (PyCFunction)(void (*)(void))replay_rows, METH_FASTCALL, replay_rows_doc},
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
