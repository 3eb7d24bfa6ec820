#!/usr/bin/env python3
"""Turns Flink's result of a Nexmark query into the expected result Weir's tests compare with.

Flink's side (Flink 2.3 running the same query over the same generator stream) writes CSV changelog files,
`<dir>/q<N>/part-*.csv`, one line per change: `<op>,<field>,...` with op +I, -U, +U or -D, timestamps as
`yyyy-MM-dd HH:mm:ss.SSS` (UTC), NULL as `\\N`, strings quoted ("...", "" for ") when empty or holding
, " \\ CR or LF. This script applies the changelog (as a multiset), rewrites each remaining row as Weir's
`file-sink` writes it in `format: text` (timestamps as epoch milliseconds, NULL as an empty field, RFC 4180
quoting only where a field holds a comma, quote or line break), sorts the rows by their UTF-8 bytes and writes

  q<N>.digest   `rows=<count> sha256=<hex of the sorted rows, each followed by \\n>`
  q<N>.csv      the sorted rows themselves, when there are at most 5000 (readable differences)

usage: from_flink.py <flink csv dir> <query: q0 q1 ...> <out dir>
"""
import collections
import datetime
import glob
import hashlib
import os
import sys

# The types of each query's result columns, in order: i (integer), d (decimal), t (timestamp), s (string).
TYPES = {
    "q0": "iiits",
    "q1": "iidts",
    "q2": "ii",
    "q3": "sssi",
    "q4": "ii",
    "q5": "ii",
    "q7": "iiits",
    "q8": "ist",
    "q11": "iitt",
}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def fields(line):
    """Splits one Flink CSV line into fields (None for NULL)."""
    out, i, n = [], 0, len(line)
    while True:
        if i < n and line[i] == '"':
            i += 1
            buf = []
            while True:
                j = line.index('"', i)
                buf.append(line[i:j])
                if j + 1 < n and line[j + 1] == '"':
                    buf.append('"')
                    i = j + 2
                    continue
                i = j + 1
                break
            out.append("".join(buf))
        else:
            j = line.find(",", i)
            j = n if j < 0 else j
            raw = line[i:j]
            out.append(None if raw == "\\N" else raw)
            i = j
        if i >= n:
            return out
        assert line[i] == ",", (line, i)
        i += 1


def weir_field(value, kind):
    if value is None:
        return ""
    if kind == "t":
        t = datetime.datetime.strptime(value, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
        return str((t - EPOCH) // datetime.timedelta(milliseconds=1))
    if kind == "s" and any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def main(src, query, out):
    types = TYPES[query]
    rows = collections.Counter()
    for path in sorted(glob.glob(os.path.join(src, query, "part-*.csv"))):
        with open(path, encoding="utf-8", newline="\n") as fh:
            for line in fh:
                line = line.rstrip("\n")
                if not line:
                    continue
                op, _, rest = line.partition(",")
                f = fields(rest)
                assert len(f) == len(types), (query, line)
                row = ",".join(weir_field(v, k) for v, k in zip(f, types))
                if op in ("+I", "+U"):
                    rows[row] += 1
                elif op in ("-U", "-D"):
                    assert rows[row] > 0, ("retraction of an absent row", line)
                    rows[row] -= 1
                else:
                    raise SystemExit("unknown op %r" % op)
    final = sorted((r for r, c in rows.items() for _ in range(c)), key=lambda s: s.encode("utf-8"))
    h = hashlib.sha256()
    for r in final:
        h.update(r.encode("utf-8") + b"\n")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, query + ".digest"), "w") as fh:
        fh.write("rows=%d sha256=%s\n" % (len(final), h.hexdigest()))
    if len(final) <= 5000:
        with open(os.path.join(out, query + ".csv"), "w", encoding="utf-8", newline="\n") as fh:
            for r in final:
                fh.write(r + "\n")
    print("%s: %d rows, sha256 %s" % (query, len(final), h.hexdigest()))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
