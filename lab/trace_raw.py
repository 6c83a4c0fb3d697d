"""The guest's trace buffer as binary ring buffer pages (guest/pmlab-evidence.c),
rendered here as the text /sys/kernel/tracing/trace would have shown.

The guest copies pages instead of formatting text (~40 us an event under
TCG); the host decodes them with the format files shipped beside them, the
way trace-cmd's kbuffer and libtraceevent do, and prints each event with its
own "print fmt". The text then goes where `cat trace` text always went
(lab/trace.py), so one trace text format stays the interface.

Input, each item a header line and exactly <n> bytes:
  "pmlab-traceraw 1\\n"
  "file <name> <n>\\n"   events/header_page, events/header_event,
                         printk_formats, saved_cmdlines, events/<sys>/<ev>/format
  "page <cpu> <n>\\n"    one ring buffer page (trace_pipe_raw)
  "end\\n"
"""

import re
import struct
from dataclasses import dataclass, field

MAGIC = b"pmlab-traceraw 1\n"
ITEM = re.compile(rb"(?:file ([!-~]{1,300})|page (\d{1,4})) (\d{1,9})\n")

# include/linux/ring_buffer.h
TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP = 29, 30, 31
MISSED_FLAGS = (1 << 31) | (1 << 30)  # RB_MISSED_EVENTS | RB_MISSED_STORED in commit


class TraceRawError(ValueError):
    """The pages cannot be decoded; the message says what and where."""


@dataclass
class Field:
    name: str
    type: str
    offset: int
    size: int
    signed: bool


@dataclass
class EventFormat:
    id: int
    name: str
    fields: dict = field(default_factory=dict)
    print_fmt: str = ""


FIELD = re.compile(r"^\s*field:(?P<decl>[^;]*);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
                   r"\s*signed:(?P<signed>\d);")


def parse_format(text):
    """An events/<sys>/<ev>/format file to an EventFormat."""
    name = re.search(r"^name: (\S+)$", text, re.M)
    ident = re.search(r"^ID: (\d+)$", text, re.M)
    if not name or not ident:
        raise TraceRawError(f"format without name or ID: {text[:80]!r}")
    fmt = EventFormat(int(ident.group(1)), name.group(1))
    for line in text.splitlines():
        match = FIELD.match(line)
        if match:
            decl = match["decl"].strip()
            named = re.search(r"(\w+)(\[\w*\])?$", decl)
            if not named:
                raise TraceRawError(f"{fmt.name}: a field without a name: {decl!r}")
            field_name = named.group(1)
            fmt.fields[field_name] = Field(field_name, decl, int(match["offset"]), int(match["size"]),
                                           match["signed"] == "1")
    printed = re.search(r"^print fmt: (.*)$", text, re.M)
    fmt.print_fmt = printed.group(1) if printed else ""
    return fmt


def items(data, start=0):
    """({file name: text}, [(cpu, page bytes)], offset after "end\\n") from the
    helper's output beginning at data[start]."""
    if not data.startswith(MAGIC, start):
        raise TraceRawError(f"no '{MAGIC.decode().strip()}' header at byte {start}: "
                            f"{data[start:start + 80]!r}")
    files, pages = {}, []
    at = start + len(MAGIC)
    while True:
        if data.startswith(b"end\n", at):
            return files, pages, at + 4
        match = ITEM.match(data, at)
        if not match:
            raise TraceRawError(f"expected an item header or 'end' at byte {at}: {data[at:at + 80]!r}")
        size = int(match.group(3))
        body = data[match.end():match.end() + size]
        if len(body) < size:
            raise TraceRawError(f"{match.group(0).decode().strip()!r} cut short: {len(body)} of {size} bytes")
        if match.group(1) is not None:
            files[match.group(1).decode()] = body.decode("utf-8", "replace")
        else:
            pages.append((int(match.group(2)), body))
        at = match.end() + size


def _header_page(text):
    """(timestamp offset, commit offset, commit size, data offset) of a page."""
    fields = {}
    for line in text.splitlines():
        match = FIELD.match(line)
        if match:
            fields[match["decl"].split()[-1]] = (int(match["offset"]), int(match["size"]))
    try:
        return fields["timestamp"][0], fields["commit"][0], fields["commit"][1], fields["data"][0]
    except KeyError as missing:
        raise TraceRawError(f"events/header_page lacks the field {missing}") from None


def page_events(page, layout):
    """[(timestamp ns, event payload bytes)] of one ring buffer page, and
    whether the kernel marked events lost before it."""
    ts_at, commit_at, commit_size, data_at = layout
    (ts,) = struct.unpack_from("<Q", page, ts_at)
    commit = int.from_bytes(page[commit_at:commit_at + commit_size], "little")
    missed = bool(commit & MISSED_FLAGS)
    end = data_at + (commit & ~MISSED_FLAGS & 0xffffffff)
    if end > len(page):
        raise TraceRawError(f"page commit {end - data_at} beyond its {len(page)} bytes")
    out = []
    at = data_at
    while at + 4 <= end:
        (word,) = struct.unpack_from("<I", page, at)
        type_len, delta = word & 0x1f, word >> 5
        if type_len == TYPE_PADDING:
            if delta == 0:  # the rest of the page is empty
                break
            (length,) = struct.unpack_from("<I", page, at + 4)
            at += 4 + length
            ts += delta
            continue
        if type_len == TYPE_TIME_EXTEND:
            (high,) = struct.unpack_from("<I", page, at + 4)
            ts += (high << 27) + delta
            at += 8
            continue
        if type_len == TYPE_TIME_STAMP:  # absolute, its top bits from the running clock
            (high,) = struct.unpack_from("<I", page, at + 4)
            ts = ((high << 27) | delta) | (ts & ~((1 << 59) - 1))
            at += 8
            continue
        ts += delta
        if type_len == 0:
            (length,) = struct.unpack_from("<I", page, at + 4)
            payload = page[at + 8:at + 4 + length]
            at += 4 + ((length + 3) & ~3)
        else:
            payload = page[at + 4:at + 4 + type_len * 4]
            at += 4 + type_len * 4
        out.append((ts, payload))
    return out, missed


# ------------------------------------------------------------- printing

def _reader(fmt, name, strings):
    """payload -> the field's value: a str for strings (dynamic, arrays, and
    `const char *` pointers into printk_formats), else an int."""
    spec = fmt.fields.get(name)
    if spec is None:
        raise TraceRawError(f"{fmt.name} has no field {name}")
    at, size = spec.offset, spec.size
    if spec.type.startswith("__data_loc"):
        def dynamic(payload):
            (loc,) = struct.unpack_from("<I", payload, at)
            start = loc & 0xffff
            return payload[start:start + (loc >> 16)].split(b"\0", 1)[0].decode("utf-8", "replace")
        return dynamic
    if "[" in spec.type:  # char name[N]; size 0: a flexible array (ftrace print's buf[])
        return lambda payload: (payload[at:at + size] if size else payload[at:]).split(
            b"\0", 1)[0].decode("utf-8", "replace")
    if size not in (1, 2, 4, 8):
        raise TraceRawError(f"{fmt.name}.{name}: a {size}-byte field")
    code = "<" + {1: "b", 2: "h", 4: "i", 8: "q"}[size]
    code = code if spec.signed else code.upper()
    if spec.type.startswith("const char *"):
        return lambda payload: (lambda value: strings.get(value, f"0x{value:x}"))(
            struct.unpack_from(code, payload, at)[0])
    return lambda payload: struct.unpack_from(code, payload, at)[0]


def _split_args(text):
    """Top-level comma-separated arguments of a print fmt."""
    args, depth, current, quoted = [], 0, "", False
    for index, char in enumerate(text):
        if char == '"' and (index == 0 or text[index - 1] != "\\"):
            quoted = not quoted
        elif not quoted and char in "({[":
            depth += 1
        elif not quoted and char in ")}]":
            depth -= 1
        elif not quoted and char == "," and depth == 0:
            args.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        args.append(current.strip())
    return args


CAST = re.compile(r"^\((?:unsigned |signed |const )*\w+(?: \*)?\)\s*")
SYMBOLIC = re.compile(r"\{\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*,\s*\"([^\"]*)\"\s*\}")
TERNARY = re.compile(r'\(?(.+?)\)?\s*\?\s*"([^"]*)"\s*:\s*"([^"]*)"')


def _argument(fmt, arg, strings):
    """payload -> value, for one argument of the print fmt (the forms
    include/trace/events/power.h uses: REC->field, casts, __get_str(),
    cond ? "a" : "b", __print_symbolic())."""
    arg = arg.strip()
    while CAST.match(arg) and not arg.startswith("(REC"):
        arg = CAST.sub("", arg, count=1)
    if arg.startswith("__get_str(") and arg.endswith(")"):
        return _reader(fmt, arg[len("__get_str("):-1], strings)
    ternary = TERNARY.fullmatch(arg)
    if ternary:
        condition, yes, no = _argument(fmt, ternary.group(1), strings), ternary.group(2), ternary.group(3)
        return lambda payload: yes if condition(payload) else no
    if arg.startswith("__print_symbolic(") and arg.endswith(")"):
        inner = _split_args(arg[len("__print_symbolic("):-1])
        value = _argument(fmt, inner[0], strings)
        table = {int(number, 0): text for number, text in SYMBOLIC.findall(",".join(inner[1:]))}
        return lambda payload: (lambda key: table.get(key, hex(key)))(value(payload))
    match = re.fullmatch(r"\(?REC->(\w+)\)?", arg)
    if match:
        return _reader(fmt, match.group(1), strings)
    raise TraceRawError(f"{fmt.name}: cannot print the argument {arg!r}")


CONVERSION = re.compile(r"%([-+ #0]*\d*(?:\.\d+)?)(hh|h|ll|l|z|j|t)?([diuxXcsp%])")


def _printer(fmt, strings):
    """payload -> "name: text", by the event's print fmt, built once per format."""
    if fmt.name == "print":  # trace_marker writes: "%ps: %s", ip, buf
        buf = _reader(fmt, "buf", strings)
        return lambda payload: "tracing_mark_write: " + buf(payload).rstrip("\n")
    match = re.fullmatch(r'"((?:[^"\\]|\\.)*)"\s*,?(.*)', fmt.print_fmt.strip())
    if not match:
        raise TraceRawError(f"{fmt.name}: cannot read its print fmt {fmt.print_fmt!r}")
    template = match.group(1).replace("\\n", "\n").replace('\\"', '"')
    conversions = [m for m in CONVERSION.finditer(template) if m.group(3) != "%"]
    arguments = [_argument(fmt, arg, strings) for arg in _split_args(match.group(2))]
    if len(arguments) != len(conversions):
        raise TraceRawError(f"{fmt.name}: {len(conversions)} conversions, {len(arguments)} arguments")
    # One Python format string: "%s" for strings and pointers, C's own otherwise.
    pieces, last, converters = [], 0, []
    for conversion, argument in zip(conversions, arguments):
        flags, length, kind = conversion.groups()
        pieces.append(template[last:conversion.start()])  # C's "%%" is Python's
        last = conversion.end()
        if kind in "diu":
            bits = 64 if length in ("l", "ll", "z", "j") else 32
            pieces.append(f"%{flags}d")
            converters.append(argument if kind != "u" else
                              (lambda a, mask: lambda payload: a(payload) & mask)(argument, (1 << bits) - 1))
        elif kind == "p":
            pieces.append("%s")
            converters.append((lambda a: lambda payload: (lambda v: f"0x{v:x}" if isinstance(v, int) else v)(
                a(payload)))(argument))
        else:
            pieces.append(f"%{flags}{kind}")
            converters.append(argument)
    pieces.append(template[last:])
    python_format = f"{fmt.name}: " + "".join(pieces)
    return lambda payload: python_format % tuple(convert(payload) for convert in converters)


class Printer:
    """Prints events as the kernel's trace file does, from their formats."""

    def __init__(self, files):
        self.strings = {}
        for line in files.get("printk_formats", "").splitlines():
            match = re.match(r'^0x([0-9a-f]+) : "(.*)"$', line)
            if match:
                self.strings[int(match.group(1), 16)] = match.group(2)
        self.comms = {0: "<idle>"}
        for line in files.get("saved_cmdlines", "").splitlines():
            pid, _, comm = line.partition(" ")
            if pid.isdigit():
                self.comms[int(pid)] = comm
        self.formats, self.printers = {}, {}
        for name, text in files.items():
            if name.startswith("events/") and name.endswith("/format"):
                fmt = parse_format(text)
                self.formats[fmt.id] = fmt

    def body(self, event_type, payload):
        printer = self.printers.get(event_type)
        if printer is None:
            fmt = self.formats.get(event_type)
            if fmt is None:
                raise TraceRawError(f"an event of type {event_type} with no format shipped")
            try:
                printer = self.printers[event_type] = _printer(fmt, self.strings)
            except TraceRawError:
                raise
            except (ValueError, IndexError) as error:  # e.g. a symbol table value int() refuses
                raise TraceRawError(f"{fmt.name}: cannot read its print fmt: {error}") from None
        try:
            return printer(payload)
        except (struct.error, TypeError, ValueError) as error:
            raise TraceRawError(f"{self.formats[event_type].name}: {error}") from None

    def line(self, cpu, ts, payload):
        if len(payload) < 8:
            raise TraceRawError(f"an event of {len(payload)} bytes, shorter than its common fields")
        event_type, flags, preempt, pid = struct.unpack_from("<HBBi", payload, 0)
        seconds, micros = divmod((ts + 500) // 1000, 1_000_000)  # ns2usecs() rounds
        return (f"{self.comms.get(pid, '<...>'):>16}-{pid:<7} [{cpu:03d}] {_lat_flags(flags, preempt)} "
                f"{seconds:5d}.{micros:06d}: {self.body(event_type, payload)}")


def _lat_flags(flags, preempt):
    """The five columns "dNs1." of trace_print_lat_fmt (kernel/trace/trace_output.c)."""
    irqs_off = "d" if flags & 0x01 else "X" if flags & 0x02 else "."
    need, preempt_resched = flags & 0x04, flags & 0x20
    resched = "N" if need and preempt_resched else "n" if need else "p" if preempt_resched else "."
    nmi, hardirq, softirq, bh_off = flags & 0x40, flags & 0x08, flags & 0x10, flags & 0x80
    irq = ("Z" if nmi and hardirq else "z" if nmi else "H" if hardirq and softirq
           else "h" if hardirq else "s" if softirq else "b" if bh_off else ".")
    depth = f"{preempt & 0xf:x}" if preempt & 0xf else "."
    migrate = f"{preempt >> 4:x}" if preempt >> 4 else "."
    return irqs_off + resched + irq + depth + migrate


def render(data, start=0):
    """(trace text, offset after the helper's output): every CPU's events in
    time order, as lines of the kernel's trace file (lab/trace.py parses them)."""
    files, pages, end = items(data, start)
    if "events/header_page" not in files:
        raise TraceRawError("no events/header_page shipped")
    layout = _header_page(files["events/header_page"])
    printer = Printer(files)
    lines = []
    for order, (cpu, page) in enumerate(pages):
        events, missed = page_events(page, layout)
        if missed:
            lines.append(((events[0][0] if events else 0), order, -1, f"CPU:{cpu} [LOST EVENTS]"))
        for index, (ts, payload) in enumerate(events):
            lines.append((ts, order, index, printer.line(cpu, ts, payload)))
    lines.sort(key=lambda entry: entry[:3])
    header = f"# tracer: nop\n# entries-in-buffer/entries-written: {len(lines)}/{len(lines)}   (from raw pages)\n#\n"
    return header + "\n".join(entry[3] for entry in lines), end
