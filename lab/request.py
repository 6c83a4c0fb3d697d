"""A run request: everything one run of cycles needs, as one value.

Every command that runs cycles (./pmlab run, commit, nightly, soak, bisect,
the pytest fixtures) builds a RunRequest once from its parsed options
(`from_args`, the options themselves are lab/options.py's) and hands it to
lab.run.run(). Where a run really crosses a process (a nightly chunk, a
bisect step, a soak shard on another guest), the same value is written by
`to_json` and read back by `from_json`, the one encoder beside the one
parser: no command line is rebuilt on the way.

The plan is explicit: each planned cycle carries its number in the whole
run (a nightly shard's cycles 2, 5, 8, ...), its mode and its pmtest knobs,
so records are written under their plan numbers from the start.

Pure: imports no libvirt (lab/errors.py, lab/modes.py, lab/calls.py, lab/devices.py only), so planning and
checking a request work on a machine without the lab's daemons.
"""

import dataclasses
import json
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Optional, Protocol, Sequence, TypeVar

from lab import calls, devices, modes
from lab.errors import LabError

ENGINES = ("libvirt", "lava")
KEEP = ("full", "failures")
DEFAULT_URI = "qemu:///system"
# pmtest knobs a cycle may set (guest/pmlab-cycle): kfault is any device's
# callback (pmtest_kfault.ko), boot words for a hibernation restore's kernel,
# calls functions to probe (lab/calls.py).
KNOBS = ("fault", "delay", "child", "panic", "kfault", "boot", "print_times", "calls")
# Guest CPUs a run may ask for: the lab kernel's NR_CPUS (kernel/config/pmlab.config).
VCPUS = range(1, 5)


@dataclass(frozen=True)
class Watchdogs:
    """Seconds each phase may take before the cycle counts as hung."""
    boot: float = 300      # fresh guest: domain start -> agent answers
    suspend: float = 60    # request sent -> guest asleep (event / console marker)
    resume: float = 60     # wake sent -> the guest's report arrives
    hibernate: float = 240  # request sent -> image written, domain off / reboot
    restore: float = 300   # domain started again -> report from the resumed image


Settings = TypeVar("Settings", "Watchdogs", "Limits")
Knobs = tuple[tuple[str, str], ...]  # ((name, value), ...)


def seconds_settings(settings: Settings, text_items: Optional[Iterable[str]], option: str,
                     name_word: str) -> Settings:
    """settings (a dataclass of seconds: Watchdogs, Limits) with the values
    of ["NAME=SECONDS", ...] (repeated or joined with commas), each a
    positive, finite number; a bad item is a LabError naming it as
    `option` ('bad watchdog ...', 'bad --limit ...')."""
    values = asdict(settings)
    for item in (part.strip() for text in text_items or () for part in str(text).split(",") if part.strip()):
        name, sep, seconds = item.partition("=")
        if not sep or name not in values:
            raise LabError(f"bad {option} '{item}': use {name_word}=SECONDS with {name_word} one of {', '.join(values)}")
        try:
            values[name] = float(seconds)
        except ValueError:
            raise LabError(f"bad {option} '{item}': '{seconds}' is not a number of seconds") from None
        if not 0 < values[name] < float("inf"):
            raise LabError(f"bad {option} '{item}': must be a positive number of seconds")
    return type(settings)(**values)


def watchdogs_from(text_items: Optional[Iterable[str]]) -> "Watchdogs":
    """Watchdogs from ["phase=seconds", ...] (--watchdog, pytest's too)."""
    return seconds_settings(Watchdogs(), text_items, "watchdog", "PHASE")


@dataclass(frozen=True)
class Limits:
    """Seconds a cycle's suspend and resume may take, as the guest measured
    them (suspend_ms, resume_ms), before the cycle fails (phase latency,
    lab.latency.over_limit). fwts s3's defaults: 15 s each."""
    suspend: float = 15
    resume: float = 15


def limits_from(text_items: Optional[Iterable[str]]) -> "Limits":
    """Limits from ["suspend=15,resume=10", ...] (--limit, repeated or joined with commas)."""
    return seconds_settings(Limits(), text_items, "--limit", "NAME")


def parse_injections(items: Optional[Iterable[str]]) -> dict[int, Knobs]:
    """["CYCLE:NAME=VALUE", ...] -> {cycle: ((name, value), ...)}: pmtest knobs
    set for that cycle only (e.g. a delay past the watchdog to make it hang)."""
    out: dict[int, Knobs] = {}
    for item in items or ():
        number, sep, knob = item.partition(":")
        name, sep2, value = knob.partition("=")
        if not (sep and sep2 and number.isdigit() and name):
            raise LabError(f"bad --inject '{item}': use CYCLE:KNOB=VALUE, e.g. '2:delay=* suspend 60000'")
        if name not in KNOBS:
            raise LabError(f"bad --inject '{item}': pmtest knobs are fault, delay, child and panic "
                           "(kfault: any device's callback, pmtest_kfault.ko; boot: words for a "
                           "hibernation restore's kernel command line; print_times: the kernel's "
                           "pm_print_times for the cycle; calls: functions to probe, lab/calls.py)")
        if name == "calls":
            try:
                calls.functions(value)
            except ValueError as error:
                raise LabError(f"bad --inject '{item}': {error}") from None
        out[int(number)] = out.get(int(number), ()) + ((name, value),)
    return out


def check_vcpus(vcpus: object) -> int:
    """`vcpus` if the lab kernel can run that many CPUs (VCPUS), else a
    LabError naming the value: every rendering of the machine (domain XML,
    the benchmark's QEMU line, a LAVA job) takes it from here."""
    if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus not in VCPUS:
        raise LabError(f"bad --vcpus {vcpus!r}: give {VCPUS.start} to {VCPUS.stop - 1} "
                       f"(the lab kernel's NR_CPUS is {VCPUS.stop - 1})")
    return vcpus


def pmtest_tree(text: Optional[str]) -> Optional[tuple[int, int]]:
    """(depth, fanout) from --pmtest-tree DEPTHxFANOUT, or None; LabError
    naming the value otherwise. The limit is pmtest's own (pmtest_platform.c
    PMTEST_TREE_MAX): at most 256 devices a tree."""
    if text is None:
        return None
    depth_text, sep, fanout_text = text.partition("x")
    if not sep or not depth_text.isdigit() or not fanout_text.isdigit():
        raise LabError(f"bad --pmtest-tree '{text}': give DEPTHxFANOUT, e.g. 1x1 or 2x2")
    depth, fanout = int(depth_text), int(fanout_text)
    devices = sum(fanout ** level for level in range(depth + 1)) if fanout else 1
    if devices > 256:
        raise LabError(f"bad --pmtest-tree '{text}': {devices} devices a tree, pmtest allows 256")
    return depth, fanout


def pmtest_tree_cmdline(tree: Optional[tuple[int, int]]) -> str:
    """Kernel command line words for pmtest's tree size (guest/init passes
    pmtest.* words to insmod)."""
    return f"pmtest.depth={tree[0]} pmtest.fanout={tree[1]}" if tree else ""


@dataclass(frozen=True)
class Guest:
    """The guest every cycle of the run boots (lab/guest.py, lab/virt.py)."""
    uri: str = DEFAULT_URI
    profile: str = "q35-ovmf"
    memory: int = 512           # MiB
    vcpus: int = 1
    pmtest_tree: Optional[tuple[int, int]] = None   # (depth, fanout) or None: pmtest's default
    devices: str = "lean"       # lab/devices.py SETS
    firmware_errata: bool = True
    watchdogs: Watchdogs = Watchdogs()
    limits: Limits = Limits()   # a cycle slower than these fails (recorded in each record, judged there)


@dataclass(frozen=True)
class Cycle:
    """One planned cycle: its number in the whole run, its mode, its knobs."""
    number: int
    mode: modes.Mode
    knobs: Knobs = ()


@dataclass(frozen=True)
class Lava:
    """Where a LAVA engine's jobs run (pipelines/lava: the lab's server)."""
    identity: str = "pmlab"
    jobs: int = 2
    tags: tuple[str, ...] = ("q35-ovmf",)
    artifacts_url: Optional[str] = None   # an existing HTTP server of the run's artifacts


@dataclass(frozen=True)
class RunRequest:
    cycles: tuple[Cycle, ...]   # in plan order
    artifacts: str              # the kernel's artifact directory
    results: str                # the results root
    run_id: str                 # the records' run id
    run_dir: Optional[str] = None  # its directory under results (default run_id; a nightly shard's own)
    guest: Guest = Guest()
    keep: str = "full"          # which cycles keep their full report (lab.judge.keep_evidence)
    lab_reruns: int = 2         # reruns of a cycle the lab failed, after the plan
    sleepgraph: bool = False    # every cycle's sleepgraph files, not only the failing ones'
    engine: str = "libvirt"
    lava: Lava = Lava()
    manifest: bool = True       # write manifest.json (a nightly writes its run's own)
    # continue the run in run_dir (./pmlab run --resume, a nightly's chunks);
    # without it lab.run refuses a run directory that holds records
    resume: bool = False

    @property
    def directory(self) -> str:
        return self.run_dir or self.run_id

    def replace(self, **changes: Any) -> "RunRequest":
        return dataclasses.replace(self, **changes)

    def check(self) -> "RunRequest":
        """LabError naming the first bad value; nothing here needs libvirt."""
        if not self.cycles:
            raise LabError("the run plans no cycle")
        numbers = [cycle.number for cycle in self.cycles]
        if len(set(numbers)) != len(numbers) or min(numbers) < 1:
            raise LabError(f"cycle numbers must be distinct and at least 1, not {numbers}")
        if self.keep not in KEEP:
            raise LabError(f"keep must be one of {', '.join(KEEP)}, not {self.keep!r}")
        if self.lab_reruns < 0:
            raise LabError("--lab-reruns must be 0 or more")
        if self.guest.memory < 128:
            raise LabError("--memory must be at least 128 MiB")
        check_vcpus(self.guest.vcpus)
        if self.engine not in ENGINES:
            raise LabError(f"unknown engine '{self.engine}' (engines: {', '.join(ENGINES)})")
        self._check_kfaults()
        return self

    def continued_after(self, last: int) -> "RunRequest":
        """This request continuing a run whose highest recorded cycle is
        `last`: if a planned number is not above it (./pmlab run --resume
        plans 1, 2, ...), the plan numbered on after it, in order, each
        cycle keeping its knobs; a plan already after it (a nightly chunk)
        as it is. A recorded cycle is never run again under its number."""
        numbers = [cycle.number for cycle in self.cycles]
        if not numbers or min(numbers) > last:
            return self
        shift = last + 1 - min(numbers)
        return self.replace(cycles=tuple(dataclasses.replace(cycle, number=cycle.number + shift)
                                         for cycle in self.cycles))

    def _check_kfaults(self) -> None:
        """Every kfault knob names a device the guest has, as far as the host
        knows them (lab.devices.kfault_problem): refused here, before a
        guest boots, not by the guest. A LAVA job's profile comes from its
        tags: any profile's names pass."""
        machine = devices.machine_of(self.guest.profile) if self.engine == "libvirt" else None
        children = any(name == "child" or (name == "boot" and "pmtest.child=" in value)
                       for cycle in self.cycles for name, value in cycle.knobs)
        for cycle in self.cycles:
            for name, value in cycle.knobs:
                problem = name == "kfault" and devices.kfault_problem(
                    value, machine, self.guest.devices, self.guest.pmtest_tree, children)
                if problem:
                    raise LabError(f"bad --inject for cycle {cycle.number}: {problem}")

    # ------------------------------------------------------------ the one encoder and parser

    def to_dict(self) -> dict[str, Any]:
        value = asdict(self)
        value["cycles"] = [[c.number, c.mode.name, c.mode.wake, [list(k) for k in c.knobs]] for c in self.cycles]
        return value

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, value: Any, template: bool = False) -> "RunRequest":
        """The request to_dict gave; LabError for anything else. A template
        (a nightly's settings for its chunks) may plan no cycle."""
        try:
            value = dict(value)
            cycles = tuple(Cycle(number, modes.parse_mode(name, wake), tuple((knob, value) for knob, value in knobs))
                           for number, name, wake, knobs in value.pop("cycles"))
            guest = dict(value.pop("guest"))
            guest["watchdogs"] = Watchdogs(**guest.get("watchdogs", {}))
            guest["limits"] = Limits(**guest.get("limits", {}))
            if guest.get("pmtest_tree") is not None:
                guest["pmtest_tree"] = tuple(guest["pmtest_tree"])
            lava = dict(value.pop("lava"))
            lava["tags"] = tuple(lava.get("tags", ()))
            request = cls(cycles=cycles, guest=Guest(**guest), lava=Lava(**lava), **value)
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise LabError(f"not a run request: {type(error).__name__}: {error}") from None
        return request if template and not cycles else request.check()

    @classmethod
    def from_json(cls, text: str) -> "RunRequest":
        try:
            value = json.loads(text)
        except ValueError as error:
            raise LabError(f"not a run request: {error}") from None
        return cls.from_dict(value)

    def write(self, path: str) -> str:
        return write_file(path, self)

    @classmethod
    def read(cls, path: str) -> "RunRequest":
        return read_file(path, cls)


class Encodable(Protocol):
    def to_json(self) -> str: ...


Decoded = TypeVar("Decoded", covariant=True)


class Decodable(Protocol[Decoded]):
    """A request class (its from_json)."""
    def from_json(self, text: str) -> Decoded: ...


def write_file(path: str, request: Encodable) -> str:
    """A request (anything with to_json) as the file a process it crosses reads."""
    from lab import files
    files.write_atomically(path, request.to_json() + "\n")
    return path


def read_file(path: str, kind: Decodable[Decoded]) -> Decoded:
    """The request of `kind` (its from_json) in `path`; LabError naming the file."""
    try:
        with open(path) as source:
            text = source.read()
    except OSError as error:
        kind_name = getattr(kind, "__name__", "request")  # a class; mypy's protocols cannot ask a class's name
        raise LabError(f"cannot read the {kind_name} {path}: {error.strerror}") from None
    return kind.from_json(text)


def numbered_cycles(plan: list[tuple[modes.Mode, int]], injections: Optional[dict[int, Knobs]] = None,
                    numbers: Optional[Sequence[int]] = None) -> tuple[Cycle, ...]:
    """[(Mode, count)] (modes.plan) -> (Cycle, ...): numbered from 1, or by
    `numbers` (a nightly shard's plan numbers, one per cycle); `injections`
    {number: knobs} by those numbers."""
    flat = [mode for _, mode in modes.numbered(plan)]
    numbers = list(numbers) if numbers is not None else list(range(1, len(flat) + 1))
    if len(numbers) != len(flat):
        raise LabError(f"{len(numbers)} numbers for {len(flat)} cycles")
    injections = injections or {}
    outside = sorted(set(injections) - set(numbers))
    if outside:  # dropped, the user would believe an error path was tested
        raise LabError(f"--inject names cycle {outside[0]}, which the plan does not have: "
                       f"its cycles are {_plan_range(numbers)}")
    return tuple(Cycle(number, mode, tuple(injections.get(number, ()))) for number, mode in zip(numbers, flat))


def _plan_range(numbers: Iterable[int]) -> str:
    """"1-3" for consecutive numbers, else "2, 5, 8"."""
    ordered = sorted(numbers)
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)):
        return str(ordered[0]) if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"
    return ", ".join(map(str, ordered))


def guest_from_args(args: Any, base: Guest = Guest()) -> Guest:
    """Guest settings from the options lab/options.py add_guest defines; an
    option not given keeps `base`'s value."""
    given = {name: getattr(args, name, None) for name in ("uri", "profile", "memory", "vcpus", "devices")}
    changes = {name: value for name, value in given.items() if value is not None}
    if getattr(args, "pmtest_tree", None) is not None:
        changes["pmtest_tree"] = pmtest_tree(args.pmtest_tree)
    if getattr(args, "watchdog", None):
        changes["watchdogs"] = watchdogs_from(args.watchdog)
    if getattr(args, "limit", None):
        changes["limits"] = limits_from(args.limit)
    if getattr(args, "firmware_errata", True) is False:
        changes["firmware_errata"] = False
    return dataclasses.replace(base, **changes)


def from_args(args: Any, artifacts: str, run_id: str, plan: Optional[list[tuple[modes.Mode, int]]] = None,
              numbers: Optional[Sequence[int]] = None, **fields: Any) -> RunRequest:
    """The request the parsed options of a verb name. `plan` [(Mode, count)]
    defaults to the options' --mode (--cycles, --wake); `artifacts` is the
    directory lab.options.artifacts_dir resolved; `numbers` the plan's
    cycle numbers (default 1, 2, ...; --inject names them); `fields` set the
    rest (keep, lab_reruns, run_dir, engine, ...); options given win."""
    if plan is None:
        plan = modes.plan(getattr(args, "mode", None), getattr(args, "cycles", None), getattr(args, "wake", None))
    cycles = numbered_cycles(plan, parse_injections(getattr(args, "inject", None)), numbers)
    return template_from(args, artifacts, run_id, **fields).replace(cycles=cycles).check()


def template_from(args: Any, artifacts: str, run_id: str, **fields: Any) -> RunRequest:
    """A request without cycles: the settings every chunk of a long run
    shares (pipelines/nightly plans the cycles chunk by chunk)."""
    for name in ("keep", "lab_reruns", "sleepgraph", "resume"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    if getattr(args, "engine", None):
        fields["engine"] = args.engine
    lava = {name: getattr(args, f"lava_{name}") for name in ("identity", "jobs", "tags", "artifacts_url")
            if getattr(args, f"lava_{name}", None) is not None}
    if isinstance(lava.get("tags"), str):
        lava["tags"] = tuple(tag for tag in lava["tags"].split(",") if tag)
    if lava:
        fields["lava"] = dataclasses.replace(fields.get("lava", Lava()), **lava)
    given = fields.pop("results", None)  # a verb's own root (bisect's build dir) unless --results names one
    results = getattr(args, "results", None) or given
    if not results:
        raise LabError("the run names no results root (--results)")
    return RunRequest(cycles=(), artifacts=artifacts, results=results, run_id=run_id,
                      guest=guest_from_args(args, fields.pop("guest", Guest())), **fields)
