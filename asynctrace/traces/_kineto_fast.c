/*
 * Optional accelerator for the Kineto loader: the per-chunk "decode + file into columns" step.
 *
 * The reference implementation is ``_Loader._collect`` in kineto.py (msgspec decode, then a
 * Python loop). This file does the same work in one pass over the JSON text, for the common
 * shape of real traces, and gives up (returns None) on anything else, so that the reference
 * path handles it and produces the same result or the same error. Giving up is always safe;
 * accepting what the reference path refuses, or reading a value differently, is a bug. So:
 *
 *   - the text is validated as strictly as msgspec does (JSON grammar, escapes, control
 *     characters, UTF-8 of every string we decode); anything doubtful gives up;
 *   - every value we keep has the exact type the reference path handles without special
 *     cases (integers within int64, decimals without exponents, strings without lone
 *     surrogates...); floats in id columns, huge numbers, duplicate keys, escaped keys... give up;
 *   - the work is split in two passes: pass 1 parses and checks the whole chunk without any
 *     side effect visible to the caller; pass 2, reached only when the chunk is accepted,
 *     interns names and labels (in event order, like the reference loop) and fills columns.
 *
 * Times follow the reference conversions bit for bit: float µs -> ns as
 * floor(x) * 1000 + rint((x - floor(x)) * 1000) (numpy's float64 arithmetic), exact decimal
 * µs (``exact`` mode) with integer arithmetic.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64
/* (2**63 - 1) // 1000: a µs value whose ns still fits in int64 */
#define MAX_ABS_US 9223372036854775LL
/* float64 µs keep every ns below 2**43 µs (see kineto.py) */
#define EXACT_US_LIMIT 8796093022208.0
/* the reference path turns ints into float64 for durations: exact below 2**53 */
#define FLOAT_EXACT_INT 9007199254740992.0

/* category codes, as in kineto.py */
enum { C_RT = 0, C_KERNEL, C_MEMCPY, C_MEMSET, C_OP, C_ANNOT, C_GPU_ANNOT, C_PY, C_SYNC };
enum { T_RT = 0, T_ACT, T_RNG, T_PY, T_SYNC, T_FLOW, N_TABLES };
static const int NCOLS[N_TABLES] = {6, 9, 6, 5, 5, 5};

/* value kinds of the fields we read */
enum { V_MISSING = 0, V_NULL, V_INT, V_FLOAT, V_STR, V_OBJ, V_OTHER };

typedef struct {
    const char *p; /* first byte inside the quotes */
    Py_ssize_t n;  /* bytes inside the quotes */
    int esc;       /* contains a backslash escape */
    int nonascii;  /* contains bytes >= 0x80 (already checked to be valid UTF-8) */
} Str;

typedef struct {
    int kind;
    int64_t i;   /* V_INT */
    const char *p; /* number text */
    Py_ssize_t n;
    int frac_digits; /* digits after '.', V_FLOAT */
    int has_exp;
    Str s; /* V_STR */
} Val;

typedef struct {
    int8_t table;
    int8_t code;
    int8_t is_start;
    int8_t name_is_str;
    int8_t pid_is_str;
    int8_t tid_is_str;
    Str name, pid_s, tid_s;
    int64_t pid, tid, ts, dur, id, corr, stream, device;
} Rec;

typedef struct {
    const char *p;
    const char *end;
} P;

/* bail: the chunk is not handled here (no Python error set). fail: a Python error is set. */
#define BAIL 1
#define FAIL (-1)

/* ------------------------------------------------------------------------------------------ */
/* Lexing */

static inline void skip_ws(P *s) {
    const char *p = s->p, *e = s->end;
    /* pretty-printed traces (Kineto's own) indent every line: skip runs of 8 spaces at once */
    while (e - p >= 8 && !memcmp(p, "        ", 8)) p += 8;
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    s->p = p;
}

/* 1: ordinary string byte (neither quote, backslash, control nor >= 0x80) */
static unsigned char plain[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) plain[c] = (c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(const char *p, const char *e, unsigned *out) {
    if (e - p < 4) return BAIL;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return BAIL;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Strict UTF-8 check of one multi-byte sequence at p (p[0] >= 0x80); its length or 0. */
static int utf8_len(const unsigned char *p, const unsigned char *e) {
    unsigned c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (e - p >= 2 && (p[1] & 0xC0) == 0x80) return 2;
        return 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (e - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0;  /* surrogates */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (e - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* beyond U+10FFFF */
        return 4;
    }
    return 0;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when one of the 8 bytes of w is '"', '\\', below 0x20 or at/above 0x80 (the
 * classic "has zero byte" / "has byte less than" bit tricks; exact as a yes/no answer). */
static inline uint64_t special8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"');
    uint64_t b = w ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | (w - ONES * 0x20) | w) & HIGHS;
}

/* A string starting at the opening quote. Escapes are checked (lone surrogates give up) and
 * non-ASCII bytes must be strict UTF-8: msgspec refuses bad UTF-8 in the strings it decodes
 * (and skips it in others, but giving up there too is merely slower). */
static int lex_string(P *s, Str *out) {
    const char *p = s->p + 1, *e = s->end;
    out->p = p;
    out->esc = 0;
    out->nonascii = 0;
    for (;;) {
        /* eight bytes at a time while none is a quote, a backslash, a control byte or
         * non-ASCII (the usual case: names and categories are plain ASCII) */
        while (e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (special8(w)) break;
            p += 8;
        }
        while (p < e && plain[(unsigned char)*p]) p++;
        if (p >= e) return BAIL;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c == '\\') {
            out->esc = 1;
            if (p + 1 >= e) return BAIL;
            char k = p[1];
            if (k == 'u') {
                unsigned u;
                if (read_u4(p + 2, e, &u)) return BAIL;
                p += 6;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || read_u4(p + 2, e, &lo) ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return BAIL;
                    p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return BAIL;
                }
                continue;
            }
            if (k == '"' || k == '\\' || k == '/' || k == 'b' || k == 'f' || k == 'n' ||
                k == 'r' || k == 't') {
                p += 2;
                continue;
            }
            return BAIL;
        }
        if (c < 0x20) return BAIL;
        /* c >= 0x80 */
        out->nonascii = 1;
        int n = utf8_len((const unsigned char *)p, (const unsigned char *)e);
        if (!n) return BAIL;
        p += n;
    }
    out->n = p - out->p;
    s->p = p + 1;
    return 0;
}

/* A JSON number (strict grammar). Integers without fraction/exponent and at most 18 digits
 * (or 19 within int64) become V_INT; others V_FLOAT with their text. */
static int lex_number(P *s, Val *v) {
    const char *p = s->p, *e = s->end, *start = p;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= e) return BAIL;
    const char *ds = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < e && *p >= '0' && *p <= '9') p++;
    } else {
        return BAIL;
    }
    Py_ssize_t int_digits = p - ds;
    int frac = 0, has_exp = 0;
    if (p < e && *p == '.') {
        p++;
        const char *fs = p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == fs) return BAIL;
        frac = (int)((p - fs) > 1000 ? 1000 : (p - fs));
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        const char *xs = p;
        while (p < e && *p >= '0' && *p <= '9') p++;
        if (p == xs) return BAIL;
        has_exp = 1;
    }
    v->p = start;
    v->n = p - start;
    v->frac_digits = frac;
    v->has_exp = has_exp;
    s->p = p;
    if (!frac && !has_exp) {
        if (int_digits > 19) {
            v->kind = V_OTHER; /* beyond int64: the reference path's business */
            return 0;
        }
        uint64_t acc = 0;
        for (const char *q = ds; q < ds + int_digits; q++) {
            uint64_t d = (uint64_t)(*q - '0');
            if (acc > (UINT64_MAX - d) / 10) {
                v->kind = V_OTHER;
                return 0;
            }
            acc = acc * 10 + d;
        }
        if (acc > (uint64_t)INT64_MAX) {
            v->kind = V_OTHER;
            return 0;
        }
        v->kind = V_INT;
        v->i = neg ? -(int64_t)acc : (int64_t)acc;
        return 0;
    }
    v->kind = V_FLOAT;
    return 0;
}

static int skip_value(P *s, int depth);

/* An object member's key and the ':' after it, with the whitespace around. */
static int lex_key(P *s, Str *k) {
    if (s->p >= s->end || *s->p != '"' || lex_string(s, k)) return BAIL;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return BAIL;
    s->p++;
    skip_ws(s);
    return 0;
}

/* After a member or element: 1 when another follows (its ',' consumed), 0 at ``close``
 * (consumed), -1 for anything else. */
static int next_member(P *s, char close) {
    skip_ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
        s->p++;
        skip_ws(s);
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return -1;
}

/* At an object's '{' or an array's '[': step inside. 1 when ``close`` follows at once (the
 * container is empty; consumed too), else 0. */
static inline int enter(P *s, char close) {
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 1;
    }
    return 0;
}

static int skip_container(P *s, int depth, char close) {
    if (depth > MAX_DEPTH) return BAIL;
    if (enter(s, close)) return 0;
    for (;;) {
        if (close == '}') {
            Str k;
            if (lex_key(s, &k)) return BAIL;
        }
        if (skip_value(s, depth + 1)) return BAIL;
        int more = next_member(s, close);
        if (more <= 0) return more ? BAIL : 0;
    }
}

static int lex_literal(P *s, const char *word, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, word, (size_t)n) != 0) return BAIL;
    s->p += n;
    return 0;
}

static int skip_value(P *s, int depth) {
    if (s->p >= s->end) return BAIL;
    char c = *s->p;
    Str str;
    Val v;
    switch (c) {
    case '{':
        return skip_container(s, depth, '}');
    case '[':
        return skip_container(s, depth, ']');
    case '"':
        return lex_string(s, &str);
    case 't':
        return lex_literal(s, "true", 4);
    case 'f':
        return lex_literal(s, "false", 5);
    case 'n':
        return lex_literal(s, "null", 4);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return lex_number(s, &v);
        return BAIL;
    }
}

/* A value of a field we read: strings (UTF-8 checked), numbers, null; objects only where the
 * caller handles them; anything else is V_OTHER (skipped over, so that the caller can give up
 * or ignore it). */
static int lex_field(P *s, Val *v) {
    if (s->p >= s->end) return BAIL;
    char c = *s->p;
    if (c == '"') {
        v->kind = V_STR;
        return lex_string(s, &v->s);
    }
    if (c == 'n') {
        v->kind = V_NULL;
        return lex_literal(s, "null", 4);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return lex_number(s, v);
    v->kind = V_OTHER;
    return skip_value(s, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Events */

enum { K_PH = 1, K_CAT = 2, K_NAME = 4, K_PID = 8, K_TID = 16, K_TS = 32, K_DUR = 64, K_ID = 128,
       K_ARGS = 256 };

typedef struct {
    Val ph, cat, name, pid, tid, ts, dur, id;
    int args_kind; /* V_MISSING, V_NULL or V_OBJ */
    Val corr, stream, device;
} Ev;

static int key_of(const Str *k) {
    switch (k->n) {
    case 2:
        if (k->p[0] == 'p' && k->p[1] == 'h') return K_PH;
        if (k->p[0] == 't' && k->p[1] == 's') return K_TS;
        if (k->p[0] == 'i' && k->p[1] == 'd') return K_ID;
        return 0;
    case 3:
        if (!memcmp(k->p, "cat", 3)) return K_CAT;
        if (!memcmp(k->p, "pid", 3)) return K_PID;
        if (!memcmp(k->p, "tid", 3)) return K_TID;
        if (!memcmp(k->p, "dur", 3)) return K_DUR;
        return 0;
    case 4:
        if (!memcmp(k->p, "name", 4)) return K_NAME;
        if (!memcmp(k->p, "args", 4)) return K_ARGS;
        return 0;
    default:
        return 0;
    }
}

static int lex_args(P *s, Ev *ev) {
    /* at '{' */
    if (enter(s, '}')) return 0;
    int seen = 0;
    for (;;) {
        Str k;
        /* an escaped key could spell one we read */
        if (lex_key(s, &k) || k.esc) return BAIL;
        Val *target = NULL;
        int bit = 0;
        if (k.n == 11 && !memcmp(k.p, "correlation", 11)) {
            target = &ev->corr;
            bit = 1;
        } else if (k.n == 6 && !memcmp(k.p, "stream", 6)) {
            target = &ev->stream;
            bit = 2;
        } else if (k.n == 6 && !memcmp(k.p, "device", 6)) {
            target = &ev->device;
            bit = 4;
        }
        if (target) {
            if (seen & bit) return BAIL;
            seen |= bit;
            if (lex_field(s, target)) return BAIL;
            /* only integers and null are read here without the reference path's special
             * cases (floats, strings and huge integers depend on the rest of the column) */
            if (target->kind != V_INT && target->kind != V_NULL) return BAIL;
        } else if (skip_value(s, 2)) {
            return BAIL;
        }
        int more = next_member(s, '}');
        if (more <= 0) return more ? BAIL : 0;
    }
}

static int lex_event(P *s, Ev *ev) {
    /* only the kinds: the rest of a Val is read only for the kind it was given (zeroing the
     * whole ~600-byte struct per event showed in profiles) */
    ev->ph.kind = ev->cat.kind = ev->name.kind = ev->pid.kind = ev->tid.kind = V_MISSING;
    ev->ts.kind = ev->dur.kind = ev->id.kind = V_MISSING;
    ev->corr.kind = ev->stream.kind = ev->device.kind = V_MISSING;
    ev->args_kind = V_MISSING;
    if (s->p >= s->end || *s->p != '{') return BAIL;
    if (enter(s, '}')) return 0;
    int seen = 0;
    for (;;) {
        Str k;
        if (lex_key(s, &k) || k.esc) return BAIL;
        int key = key_of(&k);
        if (key) {
            if (seen & key) return BAIL; /* duplicate: the last one wins there; rare, give up */
            seen |= key;
        }
        Val *target = NULL;
        switch (key) {
        case K_PH: target = &ev->ph; break;
        case K_CAT: target = &ev->cat; break;
        case K_NAME: target = &ev->name; break;
        case K_PID: target = &ev->pid; break;
        case K_TID: target = &ev->tid; break;
        case K_TS: target = &ev->ts; break;
        case K_DUR: target = &ev->dur; break;
        case K_ID: target = &ev->id; break;
        default: break;
        }
        if (target) {
            if (lex_field(s, target)) return BAIL;
        } else if (key == K_ARGS) {
            if (s->p < s->end && *s->p == '{') {
                ev->args_kind = V_OBJ;
                if (lex_args(s, ev)) return BAIL;
            } else if (s->p < s->end && *s->p == 'n') {
                ev->args_kind = V_NULL;
                if (lex_literal(s, "null", 4)) return BAIL;
            } else {
                return BAIL;
            }
        } else if (skip_value(s, 1)) {
            return BAIL;
        }
        int more = next_member(s, '}');
        if (more <= 0) return more ? BAIL : 0;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Values */

/* int | str | null field read as an id label (pid, tid) */
static int label_field(const Val *v, int64_t *out, Str *s, int8_t *is_str) {
    *is_str = 0;
    switch (v->kind) {
    case V_MISSING:
    case V_NULL:
        *out = -1;
        return 0;
    case V_INT:
        *out = v->i;
        return 0;
    case V_STR:
        *s = v->s;
        *is_str = 1;
        return 0;
    default:
        return BAIL;
    }
}

/* int | null read into an int64 column (missing and null read as -1) */
static int int_field(const Val *v, int64_t *out) {
    if (v->kind == V_MISSING || v->kind == V_NULL) {
        *out = -1;
        return 0;
    }
    if (v->kind == V_INT) {
        *out = v->i;
        return 0;
    }
    return BAIL;
}

static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A decimal without exponent as the nearest double, without the Python API (pass 1 runs
 * without the GIL): when the digits form an integer m <= 2**53 and there are at most 22 of
 * them after the point, m / 10**k is one correctly rounded IEEE division of two exact values,
 * so it equals what a correct strtod (msgspec's, numpy's) gives. Other numbers give up. */
static int to_double(const Val *v, double *out) {
    const char *p = v->p, *e = v->p + v->n;
    int neg = 0;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    uint64_t m = 0;
    int k = -1; /* digits after the point, -1 before it */
    for (; p < e; p++) {
        if (*p == '.') {
            k = 0;
            continue;
        }
        if (*p < '0' || *p > '9') return BAIL;
        if (m > (UINT64_MAX - 9) / 10) return BAIL;
        m = m * 10 + (uint64_t)(*p - '0');
        if (k >= 0) k++;
    }
    if (k < 0) k = 0;
    if (k > 22 || m > (1ULL << 53)) return BAIL;
    double x = (double)m / POW10[k];
    *out = neg ? -x : x;
    return 0;
}

static inline int64_t float_us_to_ns(double x) {
    double ip = floor(x);
    return (int64_t)ip * 1000 + (int64_t)rint((x - ip) * 1000.0);
}

typedef struct {
    int exact;
    int any_float;
    int any_big;
} TsState;

static int ts_ns(const Val *v, TsState *st, int64_t *out) {
    if (v->kind == V_INT) {
        int64_t i = v->i;
        if (i > MAX_ABS_US || i < -MAX_ABS_US) return BAIL;
        if ((double)(i < 0 ? -i : i) >= EXACT_US_LIMIT) st->any_big = 1;
        *out = i * 1000;
        return 0;
    }
    if (v->kind != V_FLOAT || v->has_exp) return BAIL;
    if (st->exact) {
        /* [-]D+.d{1,3}: exact integer arithmetic, as the reference Decimal parse */
        if (v->frac_digits > 3) return BAIL;
        const char *p = v->p, *e = v->p + v->n;
        int neg = 0;
        if (*p == '-') {
            neg = 1;
            p++;
        }
        int64_t ip = 0;
        int nd = 0;
        while (p < e && *p != '.') {
            if (++nd > 16) return BAIL;
            ip = ip * 10 + (*p++ - '0');
        }
        if (ip > MAX_ABS_US - 1) return BAIL;
        p++; /* '.' */
        int64_t fr = 0;
        int k = 0;
        while (p < e) {
            fr = fr * 10 + (*p++ - '0');
            k++;
        }
        while (k++ < 3) fr *= 10;
        int64_t ns = ip * 1000 + fr;
        *out = neg ? -ns : ns;
        return 0;
    }
    double x;
    if (to_double(v, &x)) return BAIL;
    if (!(fabs(x) < EXACT_US_LIMIT)) return BAIL; /* the reference path re-reads exactly */
    st->any_float = 1;
    *out = float_us_to_ns(x);
    return 0;
}

static int dur_ns(const Val *v, int64_t *out) {
    double x;
    if (v->kind == V_MISSING || v->kind == V_NULL) {
        *out = 0;
        return 0;
    }
    if (v->kind == V_INT) {
        x = (double)v->i;
    } else if (v->kind == V_FLOAT && !v->has_exp) {
        if (to_double(v, &x)) return BAIL;
    } else {
        return BAIL;
    }
    if (!(fabs(x) < FLOAT_EXACT_INT)) return BAIL;
    *out = float_us_to_ns(x);
    return 0;
}

/* A decoded JSON string (escapes resolved), new reference; NULL with an error set. */
static PyObject *str_to_unicode(const Str *s) {
    if (!s->esc) return PyUnicode_DecodeUTF8(s->p, s->n, "strict");
    char small[256];
    char *buf = s->n <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)s->n);
    if (!buf) return PyErr_NoMemory();
    Py_ssize_t o = 0;
    const char *p = s->p, *e = s->p + s->n;
    while (p < e) {
        if (*p != '\\') {
            buf[o++] = *p++;
            continue;
        }
        char k = p[1];
        if (k != 'u') {
            char c = k;
            switch (k) {
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            default: break;
            }
            buf[o++] = c;
            p += 2;
            continue;
        }
        unsigned u, lo;
        read_u4(p + 2, e, &u); /* checked in pass 1 */
        p += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {
            read_u4(p + 2, e, &lo);
            p += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
        }
        /* an escape never takes more UTF-8 bytes than its own text (6 or 12 bytes) */
        if (u < 0x80) {
            buf[o++] = (char)u;
        } else if (u < 0x800) {
            buf[o++] = (char)(0xC0 | (u >> 6));
            buf[o++] = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            buf[o++] = (char)(0xE0 | (u >> 12));
            buf[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
            buf[o++] = (char)(0x80 | (u & 0x3F));
        } else {
            buf[o++] = (char)(0xF0 | (u >> 18));
            buf[o++] = (char)(0x80 | ((u >> 12) & 0x3F));
            buf[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
            buf[o++] = (char)(0x80 | (u & 0x3F));
        }
    }
    PyObject *r = PyUnicode_DecodeUTF8(buf, o, "strict");
    if (buf != small) PyMem_Free(buf);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Pass 1 helpers */

enum { SK_NO_PH = 0, SK_PH, SK_X_CAT, SK_FLOW_CAT };

/* One kind of skipped event (run-length: consecutive equal ones share a record). */
typedef struct {
    int kind;
    int has_str; /* SK_X_CAT / SK_FLOW_CAT with a string category (else "None") */
    Str s;
    Py_ssize_t count;
} Skip;

typedef struct {
    Rec *recs;
    Py_ssize_t n, cap;
    Skip *skips;
    Py_ssize_t n_skips, cap_skips;
    Py_ssize_t per_table[N_TABLES];
} Acc;

static void *grow(void *p, Py_ssize_t *cap, size_t item) {
    Py_ssize_t c = *cap ? *cap * 2 : 1024;
    void *q = PyMem_RawRealloc(p, (size_t)c * item);
    if (q) *cap = c;
    return q;
}

static int count_skip(Acc *a, int kind, const Val *v) {
    int has_str = v && v->kind == V_STR;
    if (a->n_skips) {
        Skip *last = &a->skips[a->n_skips - 1];
        if (last->kind == kind && last->has_str == has_str &&
            (!has_str || (last->s.n == v->s.n && !memcmp(last->s.p, v->s.p, (size_t)v->s.n)))) {
            last->count++;
            return 0;
        }
    }
    if (a->n_skips == a->cap_skips) {
        Skip *q = grow(a->skips, &a->cap_skips, sizeof(Skip));
        if (!q) return BAIL; /* out of memory: the Python path will say so */
        a->skips = q;
    }
    Skip *k = &a->skips[a->n_skips++];
    k->kind = kind;
    k->has_str = has_str;
    if (has_str) k->s = v->s;
    k->count = 1;
    return 0;
}

static Rec *push(Acc *a) {
    if (a->n == a->cap) {
        Rec *r = grow(a->recs, &a->cap, sizeof(Rec));
        if (!r) return NULL;
        a->recs = r;
    }
    return &a->recs[a->n++];
}

static inline int is1(const Val *v, char c) {
    return v->kind == V_STR && v->s.n == 1 && v->s.p[0] == c;
}

#define MAX_CATS 64

/* The caller's category tables as UTF-8, so that pass 1 can look up without the GIL. */
typedef struct {
    const char *name[MAX_CATS];
    Py_ssize_t len[MAX_CATS];
    int code[MAX_CATS]; /* -1: a launch flow category only */
    int flow[MAX_CATS];
    int n;
    /* one-entry cache: categories repeat from one event to the next */
    const char *last_p;
    Py_ssize_t last_n;
    int last_code, last_flow;
} Cats;

static int cats_add(Cats *c, PyObject *key, int code, int flow) {
    Py_ssize_t n;
    const char *u = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &n) : NULL;
    if (!u) {
        PyErr_Clear();
        return BAIL;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->len[i] == n && !memcmp(c->name[i], u, (size_t)n)) {
            if (code >= 0) c->code[i] = code;
            c->flow[i] |= flow;
            return 0;
        }
    }
    if (c->n == MAX_CATS) return BAIL;
    c->name[c->n] = u;
    c->len[c->n] = n;
    c->code[c->n] = code;
    c->flow[c->n] = flow;
    c->n++;
    return 0;
}

/* Fill from the codes dict and the flow categories (with the GIL); BAIL if unusable. */
static int cats_init(Cats *c, PyObject *codes, PyObject *flow_cats) {
    memset(c, 0, sizeof *c);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(codes, &pos, &key, &value)) {
        long code = PyLong_AsLong(value);
        if (code < 0 || code > C_SYNC) {
            PyErr_Clear();
            return BAIL;
        }
        if (cats_add(c, key, (int)code, 0)) return BAIL;
    }
    PyObject *it = PyObject_GetIter(flow_cats);
    if (!it) return FAIL;
    while ((key = PyIter_Next(it))) {
        int rc = cats_add(c, key, -1, 1);
        Py_DECREF(key);
        if (rc) {
            Py_DECREF(it);
            return rc;
        }
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? FAIL : 0;
}

static void cat_lookup(Cats *c, const Val *cat, int *code, int *flow) {
    *code = -1;
    *flow = 0;
    if (cat->kind != V_STR || cat->s.esc) return; /* escaped: checked by the caller */
    if (c->last_p && c->last_n == cat->s.n && !memcmp(c->last_p, cat->s.p, (size_t)cat->s.n)) {
        *code = c->last_code;
        *flow = c->last_flow;
        return;
    }
    for (int i = 0; i < c->n; i++) {
        if (c->len[i] == cat->s.n && !memcmp(c->name[i], cat->s.p, (size_t)cat->s.n)) {
            *code = c->code[i];
            *flow = c->flow[i];
            break;
        }
    }
    c->last_p = cat->s.p;
    c->last_n = cat->s.n;
    c->last_code = *code;
    c->last_flow = *flow;
}

static int table_of(int code) {
    switch (code) {
    case C_RT: return T_RT;
    case C_KERNEL:
    case C_MEMCPY:
    case C_MEMSET: return T_ACT;
    case C_PY: return T_PY;
    case C_SYNC: return T_SYNC;
    default: return T_RNG;
    }
}

/* Pass 1 for one event: classify, check, and record what pass 2 needs. No Python API: this
 * runs without the GIL. */
static int file_event(const Ev *ev, Acc *a, TsState *ts, Cats *cats, Py_ssize_t *n_ph) {
    /* ph: str only (null or other types are the reference path's validation errors) */
    if (ev->ph.kind != V_MISSING && ev->ph.kind != V_STR) return BAIL;
    if (ev->ph.kind == V_STR && ev->ph.s.esc) return BAIL;
    /* every typed field must have a type the reference decoder accepts */
    if (ev->cat.kind != V_MISSING && ev->cat.kind != V_NULL && ev->cat.kind != V_STR) return BAIL;
    if (ev->cat.kind == V_STR && ev->cat.s.esc) return BAIL;
    if (ev->name.kind != V_MISSING && ev->name.kind != V_NULL && ev->name.kind != V_STR)
        return BAIL;
    if (ev->ts.kind == V_STR || ev->ts.kind == V_OTHER) return BAIL;
    if (ev->dur.kind == V_STR || ev->dur.kind == V_OTHER) return BAIL;
    /* msgspec refuses floats beyond float64 in ts and dur ("Number out of range") even where
     * the value is not used (skipped events, a flow's dur): give up on exponents, and on
     * numbers too long to be sure (300 characters without exponent stay below 1e300) */
    if (ev->ts.kind == V_FLOAT && (ev->ts.has_exp || ev->ts.n > 300)) return BAIL;
    if (ev->dur.kind == V_FLOAT && (ev->dur.has_exp || ev->dur.n > 300)) return BAIL;
    if (ev->pid.kind == V_FLOAT || ev->pid.kind == V_OTHER) return BAIL;
    if (ev->tid.kind == V_FLOAT || ev->tid.kind == V_OTHER) return BAIL;
    if (ev->id.kind == V_FLOAT || ev->id.kind == V_OTHER) return BAIL;

    int is_x = is1(&ev->ph, 'X');
    int is_s = is1(&ev->ph, 's');
    int is_f = is1(&ev->ph, 'f');
    if (!is_x && !is_s && !is_f) {
        if (ev->ph.kind == V_STR && ev->ph.s.n > 0) {
            (*n_ph)++;
            return count_skip(a, SK_PH, &ev->ph);
        }
        return count_skip(a, SK_NO_PH, NULL);
    }
    (*n_ph)++;
    if (ev->ts.kind == V_MISSING || ev->ts.kind == V_NULL) return BAIL;
    int code, flow;
    cat_lookup(cats, &ev->cat, &code, &flow);
    if (is_x && code < 0) return count_skip(a, SK_X_CAT, &ev->cat);
    if (!is_x && !flow) return count_skip(a, SK_FLOW_CAT, &ev->cat);

    Rec *r = push(a);
    if (!r) return BAIL;
    memset(r, 0, sizeof *r);
    int rc = ts_ns(&ev->ts, ts, &r->ts);
    if (!rc) rc = label_field(&ev->pid, &r->pid, &r->pid_s, &r->pid_is_str);
    if (!rc) rc = label_field(&ev->tid, &r->tid, &r->tid_s, &r->tid_is_str);
    if (rc) return rc;
    if (!is_x) {
        r->table = T_FLOW;
        r->is_start = (int8_t)is_s;
        if (ev->id.kind == V_STR) return BAIL;
        rc = int_field(&ev->id, &r->id);
        if (rc) return rc;
        a->per_table[T_FLOW]++;
        return 0;
    }
    r->code = (int8_t)code;
    r->table = (int8_t)table_of(code);
    if ((rc = dur_ns(&ev->dur, &r->dur))) return rc;
    if (ev->name.kind == V_STR) {
        r->name = ev->name.s;
        r->name_is_str = 1;
    }
    if ((rc = int_field(&ev->corr, &r->corr))) return rc;
    if ((rc = int_field(&ev->stream, &r->stream))) return rc;
    if ((rc = int_field(&ev->device, &r->device))) return rc;
    a->per_table[r->table]++;
    return 0;
}

/* The skip records as {key: count}, keys spelled as the reference loop spells them. */
static PyObject *skipped_dict(const Acc *a) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (Py_ssize_t i = 0; i < a->n_skips; i++) {
        const Skip *k = &a->skips[i];
        PyObject *key = NULL;
        if (k->kind == SK_NO_PH) {
            key = PyUnicode_FromString("no ph");
        } else {
            const char *prefix = k->kind == SK_PH ? "ph=" : k->kind == SK_X_CAT ? "X cat=" : "flow cat=";
            if (k->kind == SK_PH || k->has_str) {
                PyObject *u = str_to_unicode(&k->s);
                if (u) {
                    key = PyUnicode_FromFormat("%s%U", prefix, u);
                    Py_DECREF(u);
                }
            } else {
                key = PyUnicode_FromFormat("%sNone", prefix);
            }
        }
        if (!key) goto fail;
        PyObject *old = PyDict_GetItemWithError(d, key);
        if (!old && PyErr_Occurred()) {
            Py_DECREF(key);
            goto fail;
        }
        Py_ssize_t n = k->count + (old ? PyLong_AsSsize_t(old) : 0);
        PyObject *v = PyLong_FromSsize_t(n);
        int rc = v ? PyDict_SetItem(d, key, v) : -1;
        Py_XDECREF(v);
        Py_DECREF(key);
        if (rc < 0) goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Pass 2 */

/* Raw JSON string bytes -> the int the Python side gave them (a name's string index, a
 * label's number), so that a repeated name costs a hash of its bytes rather than a str, a
 * dict lookup and a call. Keys are the bytes as written (escapes included): two spellings of
 * one string get separate entries with the same value, which is harmless. */
typedef struct {
    uint64_t hash;
    Py_ssize_t off, len; /* len < 0: empty slot */
    int64_t value;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask, used;
    char *arena;
    size_t arena_len, arena_cap;
} Map;

/* One table's columns (int64 each), all of ``n`` rows with room for ``cap``. */
typedef struct {
    int64_t *col[9];
    Py_ssize_t n, cap;
} Table;

static void table_free(Table *tb) {
    for (int c = 0; c < 9; c++) PyMem_RawFree(tb->col[c]);
    memset(tb, 0, sizeof *tb);
}

/* Room for ``need`` rows in every column; FAIL (MemoryError set) otherwise. */
static int table_reserve(Table *tb, int ncols, Py_ssize_t need) {
    if (need <= tb->cap) return 0;
    Py_ssize_t cap = tb->cap ? tb->cap : 4096;
    /* 1.5x, not 2x: the columns end with less unused room (graph-launch trace: 0.5 MiB lower
     * peak RSS, 2021 trace 1.2 MiB), and large reallocs are remaps, so no slower */
    while (cap < need) cap += cap / 2;
    for (int c = 0; c < ncols; c++) {
        int64_t *q = PyMem_RawRealloc(tb->col[c], (size_t)cap * sizeof(int64_t));
        if (!q) {
            PyErr_NoMemory();
            return FAIL;
        }
        tb->col[c] = q;
    }
    tb->cap = cap;
    return 0;
}

typedef struct {
    Map names, labels;
    int have_none;
    int64_t none_value;
    /* pass 1's buffers, kept from one chunk to the next: fresh ones would cost page faults */
    Rec *recs;
    Py_ssize_t cap_recs;
    Skip *skips;
    Py_ssize_t cap_skips;
    /* the columns filed so far, grown chunk after chunk and handed over by take_columns() */
    Table tables[N_TABLES];
} Cache;

static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, (size_t)n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static Slot *map_find(Map *m, const char *p, Py_ssize_t n, uint64_t h) {
    if (!m->slots) return NULL;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        Slot *s = &m->slots[i];
        if (s->len < 0) return s;
        if (s->hash == h && s->len == n && !memcmp(m->arena + s->off, p, (size_t)n)) return s;
    }
}

static int map_put(Map *m, const char *p, Py_ssize_t n, uint64_t h, int64_t value) {
    if (!m->slots || (m->used + 1) * 2 > m->mask + 1) {
        size_t cap = m->slots ? (m->mask + 1) * 2 : 1024;
        Slot *ns = PyMem_Malloc(cap * sizeof(Slot));
        if (!ns) return -1;
        for (size_t i = 0; i < cap; i++) ns[i].len = -1;
        for (size_t i = 0; m->slots && i <= m->mask; i++) {
            Slot *o = &m->slots[i];
            if (o->len < 0) continue;
            size_t j = o->hash & (cap - 1);
            while (ns[j].len >= 0) j = (j + 1) & (cap - 1);
            ns[j] = *o;
        }
        PyMem_Free(m->slots);
        m->slots = ns;
        m->mask = cap - 1;
    }
    if (m->arena_len + (size_t)n > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 1 << 16;
        while (cap < m->arena_len + (size_t)n) cap *= 2;
        char *a = PyMem_Realloc(m->arena, cap);
        if (!a) return -1;
        m->arena = a;
        m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, p, (size_t)n);
    Slot *s = map_find(m, p, n, h);
    s->hash = h;
    s->off = (Py_ssize_t)m->arena_len;
    s->len = n;
    s->value = value;
    m->arena_len += (size_t)n;
    m->used++;
    return 0;
}

static void map_free(Map *m) {
    PyMem_Free(m->slots);
    PyMem_Free(m->arena);
}

#define CACHE_NAME "asynctrace.traces._kineto_fast.Cache"

static void cache_destroy(PyObject *capsule) {
    Cache *c = PyCapsule_GetPointer(capsule, CACHE_NAME);
    if (!c) return;
    map_free(&c->names);
    map_free(&c->labels);
    PyMem_RawFree(c->recs);
    PyMem_RawFree(c->skips);
    for (int t = 0; t < N_TABLES; t++) table_free(&c->tables[t]);
    PyMem_Free(c);
}

PyDoc_STRVAR(new_cache_doc,
"new_cache()\n--\n\nState kept across the chunks of one file (see collect).");

static PyObject *new_cache(PyObject *self, PyObject *unused) {
    Cache *c = PyMem_Calloc(1, sizeof(Cache));
    if (!c) return PyErr_NoMemory();
    PyObject *cap = PyCapsule_New(c, CACHE_NAME, cache_destroy);
    if (!cap) PyMem_Free(c);
    return cap;
}

/* A number from a Python int result; FAIL with an error set otherwise. */
static int as_i64(PyObject *n, int64_t *out) {
    if (!n) return FAIL;
    *out = PyLong_AsLongLong(n);
    Py_DECREF(n);
    return (*out == -1 && PyErr_Occurred()) ? FAIL : 0;
}

static int label_value(Cache *c, const Rec *r, int which, PyObject *ids, int64_t *out) {
    if (!(which ? r->tid_is_str : r->pid_is_str)) {
        *out = which ? r->tid : r->pid;
        return 0;
    }
    const Str *s = which ? &r->tid_s : &r->pid_s;
    uint64_t h = hash_bytes(s->p, s->n);
    Slot *slot = map_find(&c->labels, s->p, s->n, h);
    if (slot && slot->len >= 0) {
        *out = slot->value;
        return 0;
    }
    PyObject *u = str_to_unicode(s);
    if (!u) return FAIL;
    PyObject *n = PyObject_CallOneArg(ids, u);
    Py_DECREF(u);
    if (as_i64(n, out)) return FAIL;
    if (map_put(&c->labels, s->p, s->n, h, *out) < 0) {
        PyErr_NoMemory();
        return FAIL;
    }
    return 0;
}

static int name_value(Cache *c, const Rec *r, PyObject *name_ids, PyObject *intern,
                      PyObject *empty, int64_t *out) {
    uint64_t h = 0;
    if (r->name_is_str) {
        h = hash_bytes(r->name.p, r->name.n);
        Slot *slot = map_find(&c->names, r->name.p, r->name.n, h);
        if (slot && slot->len >= 0) {
            *out = slot->value;
            return 0;
        }
    } else if (c->have_none) {
        *out = c->none_value;
        return 0;
    }
    PyObject *key;
    if (r->name_is_str) {
        key = str_to_unicode(&r->name);
        if (!key) return FAIL;
    } else {
        key = Py_NewRef(Py_None);
    }
    /* the reference loop: name_ids.get(name), else intern(name or "") and remember it */
    PyObject *id = PyDict_GetItemWithError(name_ids, key);
    if (id) {
        Py_INCREF(id);
    } else {
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            return FAIL;
        }
        id = PyObject_CallOneArg(intern, r->name_is_str ? key : empty);
        if (!id || PyDict_SetItem(name_ids, key, id) < 0) {
            Py_XDECREF(id);
            Py_DECREF(key);
            return FAIL;
        }
    }
    Py_DECREF(key);
    if (as_i64(id, out)) return FAIL;
    if (r->name_is_str) {
        if (map_put(&c->names, r->name.p, r->name.n, h, *out) < 0) {
            PyErr_NoMemory();
            return FAIL;
        }
    } else {
        c->have_none = 1;
        c->none_value = *out;
    }
    return 0;
}

/* Pass 2: names and labels in event order, then the rows appended to the cache's tables. The
 * rows count only once the whole chunk is filed, so a failure leaves the tables as they were. */
static int fill_columns(const Acc *a, Cache *cache, PyObject *name_ids, PyObject *intern,
                        PyObject *ids) {
    int64_t *cols[N_TABLES][9];
    Py_ssize_t fill[N_TABLES];
    for (int t = 0; t < N_TABLES; t++) {
        Table *tb = &cache->tables[t];
        if (table_reserve(tb, NCOLS[t], tb->n + a->per_table[t])) return FAIL;
        for (int c = 0; c < 9; c++) cols[t][c] = c < NCOLS[t] ? tb->col[c] : NULL;
        fill[t] = tb->n;
    }
    PyObject *empty = PyUnicode_FromStringAndSize("", 0);
    if (!empty) return FAIL;
    int rc = FAIL;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        const Rec *r = &a->recs[i];
        int t = r->table;
        Py_ssize_t j = fill[t]++;
        int64_t pid, tid = -1, name = 0;
        /* same order of label and name lookups as the reference loop */
        if (label_value(cache, r, 0, ids, &pid)) goto done;
        if (t != T_FLOW && name_value(cache, r, name_ids, intern, empty, &name)) goto done;
        if (t != T_SYNC && label_value(cache, r, 1, ids, &tid)) goto done;
        int64_t **k = cols[t];
        switch (t) {
        case T_RT: /* ts dur pid tid name corr */
            k[0][j] = r->ts; k[1][j] = r->dur; k[2][j] = pid; k[3][j] = tid;
            k[4][j] = name; k[5][j] = r->corr;
            break;
        case T_ACT: /* ts dur pid tid device stream name kind corr */
            k[0][j] = r->ts; k[1][j] = r->dur; k[2][j] = pid; k[3][j] = tid;
            k[4][j] = r->device; k[5][j] = r->stream; k[6][j] = name; k[7][j] = r->code;
            k[8][j] = r->corr;
            break;
        case T_RNG: /* ts dur pid tid name kind */
            k[0][j] = r->ts; k[1][j] = r->dur; k[2][j] = pid; k[3][j] = tid;
            k[4][j] = name; k[5][j] = r->code;
            break;
        case T_PY: /* ts dur pid tid name */
            k[0][j] = r->ts; k[1][j] = r->dur; k[2][j] = pid; k[3][j] = tid; k[4][j] = name;
            break;
        case T_SYNC: /* ts dur pid stream corr */
            k[0][j] = r->ts; k[1][j] = r->dur; k[2][j] = pid; k[3][j] = r->stream;
            k[4][j] = r->corr;
            break;
        default: /* T_FLOW: ts id is_start pid tid */
            k[0][j] = r->ts; k[1][j] = r->id; k[2][j] = r->is_start; k[3][j] = pid;
            k[4][j] = tid;
            break;
        }
    }
    for (int t = 0; t < N_TABLES; t++) cache->tables[t].n = fill[t];
    rc = 0;
done:
    Py_DECREF(empty);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Columns handed over to numpy without a copy */

typedef struct {
    PyObject_HEAD
    int64_t *data;
    Py_ssize_t n;
} ColumnObject;

static void column_dealloc(PyObject *self) {
    PyMem_RawFree(((ColumnObject *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    ColumnObject *c = (ColumnObject *)self;
    return PyBuffer_FillInfo(view, self, c->data, c->n * (Py_ssize_t)sizeof(int64_t), 0, flags);
}

static PyBufferProcs column_as_buffer = {column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "asynctrace.traces._kineto_fast.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One int64 column filed by collect(), owned here and exposed as a writable buffer "
              "(np.frombuffer(column, np.int64) shares it).",
};

PyDoc_STRVAR(take_columns_doc,
"take_columns(cache)\n--\n\n"
"The columns filed since the last call, per table (None for a table without rows), in the\n"
"order of kineto._Loader's tables; the cache starts empty again.");

static PyObject *take_columns(PyObject *self, PyObject *capsule) {
    Cache *cache = PyCapsule_GetPointer(capsule, CACHE_NAME);
    if (!cache) return NULL;
    PyObject *result = PyTuple_New(N_TABLES);
    if (!result) return NULL;
    for (int t = 0; t < N_TABLES; t++) {
        Table *tb = &cache->tables[t];
        if (!tb->n) {
            PyTuple_SET_ITEM(result, t, Py_NewRef(Py_None));
            continue;
        }
        PyObject *tup = PyTuple_New(NCOLS[t]);
        if (!tup) goto fail;
        PyTuple_SET_ITEM(result, t, tup);
        for (int c = 0; c < NCOLS[t]; c++) {
            ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
            if (!col) goto fail;
            /* give back the room not used (a shrinking realloc keeps the data in place or
             * moves it; either way the column owns exactly its rows) */
            int64_t *q = PyMem_RawRealloc(tb->col[c], (size_t)tb->n * sizeof(int64_t));
            col->data = q ? q : tb->col[c];
            col->n = tb->n;
            tb->col[c] = NULL;
            PyTuple_SET_ITEM(tup, c, (PyObject *)col);
        }
        table_free(tb);
    }
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */

PyDoc_STRVAR(collect_doc,
"collect(buf, start, stop, exact, cat_codes, flow_cats, name_ids, intern, ids, cache)\n"
"--\n\n"
"File the events in buf[start:stop] (elements of traceEvents, without the brackets) into\n"
"the cache's columns (see take_columns). Returns (n_events, n_with_ph, skipped) or None when\n"
"the chunk must go through the reference path; nothing the caller sees changes before it is\n"
"accepted.\n"
"Parsing runs without the GIL.");

static PyObject *collect(PyObject *self, PyObject *args) {
    PyObject *bufobj, *codes, *flow_cats, *name_ids, *intern, *ids, *capsule;
    Py_ssize_t start, stop;
    int exact;
    if (!PyArg_ParseTuple(args, "OnnpO!OO!OOO", &bufobj, &start, &stop, &exact, &PyDict_Type,
                          &codes, &flow_cats, &PyDict_Type, &name_ids, &intern, &ids, &capsule))
        return NULL;
    Cache *cache = PyCapsule_GetPointer(capsule, CACHE_NAME);
    if (!cache) return NULL;
    Cats cats;
    int rc = cats_init(&cats, codes, flow_cats);
    if (rc == FAIL) return NULL;
    if (rc == BAIL) Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL, *skipped = NULL;
    Acc a;
    memset(&a, 0, sizeof a);
    a.recs = cache->recs;
    a.cap = cache->cap_recs;
    a.skips = cache->skips;
    a.cap_skips = cache->cap_skips;
    if (start < 0 || stop > view.len || start >= stop) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    P s = {(const char *)view.buf + start, (const char *)view.buf + stop};
    TsState ts = {exact, 0, 0};
    Py_ssize_t n_events = 0, n_ph = 0;
    Py_BEGIN_ALLOW_THREADS
    skip_ws(&s);
    for (;;) {
        Ev ev;
        if ((rc = lex_event(&s, &ev))) break;
        n_events++;
        if ((rc = file_event(&ev, &a, &ts, &cats, &n_ph))) break;
        skip_ws(&s);
        if (s.p >= s.end) break;
        if (*s.p != ',') {
            rc = BAIL;
            break;
        }
        s.p++;
        skip_ws(&s);
    }
    Py_END_ALLOW_THREADS
    if (rc || (ts.any_float && ts.any_big)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    skipped = skipped_dict(&a);
    if (!skipped) goto done;
    if (fill_columns(&a, cache, name_ids, intern, ids)) goto done;
    result = Py_BuildValue("nnO", n_events, n_ph, skipped);
done:
    cache->recs = a.recs;
    cache->cap_recs = a.cap;
    cache->skips = a.skips;
    cache->cap_skips = a.cap_skips;
    Py_XDECREF(skipped);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"collect", collect, METH_VARARGS, collect_doc},
    {"new_cache", new_cache, METH_NOARGS, new_cache_doc},
    {"take_columns", take_columns, METH_O, take_columns_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto_fast",
    "Optional accelerator for asynctrace's Kineto loader (see kineto.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kineto_fast(void) {
    init_tables();
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Column", (PyObject *)&ColumnType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
