"""The command-line options every pmlab command shares, defined once.

./pmlab's verbs (cli/main.py) and the modules behind them (lab.run,
lab.bench, pipelines.commit/nightly/soak/bisect, the LAVA job) build their
parsers from these pieces, so an option has one spelling and one meaning
everywhere. They live in lab/ because lab.run parses them itself (nightly
runs it as a process) and lab imports nothing above it.

  --mode MODE[/WAKE][*N]   the one mode grammar (lab/modes.py)
  --cycles N               older spelling of a count: --mode mem --cycles 10
  --baseline / --artifacts which kernel: build/baseline/out or a directory
  --inject CYCLE:KNOB=VALUE
  --results DIR            the results root (every command; pytest's is
                           --lab-results, ./pmlab test translates)
  --hours H                wall-clock budget of this invocation
  --keep full|failures     which cycles keep their full guest report (trace,
                           pmtest log) and console lines in the run: every
                           cycle (default of lab.run / ./pmlab run, a short
                           run one looks at) or only those that did not pass
                           (default of nightly and soak, thousands of cycles)
  --lab-reruns N           run a cycle the lab failed (verdict error) again,
                           up to N times, after the plan (lab.run: 2;
                           nightly's chunks: 0, their errors stay errors)
"""

import os

from lab import devices, modes
from lab.errors import LabError
from lab.profiles import PROFILES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "results")
MODE_HELP = (f"{modes.GRAMMAR}; repeat or join with commas. MODE is mem, freeze, disk or "
             "pm_test-{freezer,devices,platform,processors,core}; WAKE for mem: pmwakeup|rtc, "
             "freeze: powerbutton, disk: platform|reboot")


def add_modes(parser, default_text, cycles=True, wake=True):
    """--mode (and the older --cycles, --wake)."""
    parser.add_argument("--mode", action="append", metavar="MODE[/WAKE][*N]",
                        help=f"{MODE_HELP} (default {default_text})")
    if cycles:
        parser.add_argument("--cycles", metavar="N",
                            help="older spelling of a count: --mode mem --cycles 10 is --mode mem*10")
    if wake:
        parser.add_argument("--wake", help="wake source of every --mode item that names none")


def add_kernel(parser, artifacts_default=None):
    """Which kernel's artifacts: --artifacts DIR, --baseline (the unpatched
    kernel: build/baseline/out), or --kernel SPEC [--series DIR|none]
    [--config FILE] (the
    artifacts kernel/build --kernel SPEC wrote; lab/kernels.py). Read them
    with artifacts_dir()."""
    parser.add_argument("--artifacts", default=artifacts_default, metavar="DIR",
                        help="kernel artifact directory (default build/out)")
    parser.add_argument("--baseline", action="store_true",
                        help="use the unpatched baseline kernel, build/baseline/out (kernel/build --baseline)")
    parser.add_argument("--kernel", metavar="SPEC",
                        help="linux-source-6.1 (default), linux-source-6.12, a tarball or a git tree DIR[@REF]: "
                             "its build directory's artifacts (./pmlab run and test build it first)")
    parser.add_argument("--series", metavar="DIR|none",
                        help="with --kernel: the patch series applied (default: the bundled one for that kernel)")
    parser.add_argument("--config", metavar="FILE",
                        help="a .config the project fragment is merged onto instead of the tree's tinyconfig "
                             "(a build directory of its own)")


def names_kernel(args):
    """Whether the add_kernel options name a kernel to build (--kernel,
    --series or --config), rather than an artifact directory."""
    return any(getattr(args, name, None) for name in ("kernel", "series", "config"))


def artifacts_dir(args, default=None):
    """The artifact directory the add_kernel options name (LabError for a
    bad --kernel/--series, or a mix that names two kernels)."""
    from lab import artifacts as artifacts_mod
    from lab import kernels
    spec, series, config = (getattr(args, name, None) for name in ("kernel", "series", "config"))
    if names_kernel(args):
        if args.baseline or (args.artifacts and args.artifacts != default):
            raise LabError("--kernel/--series/--config name a kernel: give them without --artifacts or --baseline")
        try:
            return kernels.resolve(spec, series, config=config).artifacts
        except kernels.KernelSpecError as error:
            raise LabError(str(error)) from None
    if args.baseline:
        return artifacts_mod.BASELINE_DIR
    return args.artifacts or default or artifacts_mod.DEFAULT_DIR


def add_guest(parser, defaults=None):
    """libvirt URI, machine profile, guest size and watchdogs, as lab.run takes them.
    `defaults` {option: value}; None leaves an option to lab.run's default."""
    defaults = defaults or {}
    parser.add_argument("--uri", default=defaults.get("uri"), help="libvirt URI (default qemu:///system)")
    parser.add_argument("--profile", default=defaults.get("profile"), choices=sorted(PROFILES),
                        help="machine: q35-ovmf (default) or the faster pc-seabios")
    parser.add_argument("--memory", type=int, default=defaults.get("memory"), help="guest MiB (default 512)")
    parser.add_argument("--vcpus", type=int, default=defaults.get("vcpus"), help="guest CPUs, 1 to 4 (default 1)")
    parser.add_argument("--watchdog", action="append", metavar="PHASE=SECONDS",
                        help="boot, suspend, resume, hibernate or restore watchdog")
    parser.add_argument("--limit", action="append", metavar="NAME=SECONDS[,...]",
                        help="a cycle whose suspend or resume (the guest's own trace times) takes longer "
                             "fails, phase latency (default suspend=15,resume=15, as fwts)")
    parser.add_argument("--pmtest-tree", metavar="DEPTHxFANOUT",
                        help="size of pmtest's platform device trees (full, compat, legacy, async): levels "
                             "below each root x children per device; pmtest's default 2x2 is 7 devices a tree "
                             "and 15 async; 1x1 (2 and 3) makes a fast soak")
    parser.add_argument("--devices", default=defaults.get("devices"), choices=devices.SETS,
                        help="the guest's devices (lab/devices.py): lean, the lab's own plumbing (default), or "
                             "zoo, real USB, SATA, SCSI, NVMe, network, sound, MMC, watchdog, RNG and balloon "
                             "devices through their in-tree drivers, each probed after every resume")
    parser.add_argument("--no-firmware-errata", dest="firmware_errata", action="store_false",
                        help="boot without the profile's firmware errata (lab/virt.py PROFILES: q35-ovmf "
                             "reserves the page Debian's OVMF clears on every S3 resume); pmtest_ramguard "
                             "then shows the firmware's damage, a fail in phase platform")


def add_inject(parser, what="one cycle"):
    parser.add_argument("--inject", action="append", metavar="CYCLE:KNOB=VALUE",
                        help=f"pmtest knob for {what}, e.g. '2:fault=* suspend 5 1' or '2:delay=* suspend 60000'")


def add_results(parser, run_id_help="default: a new id"):
    """--results DIR and, unless run_id_help is None, --run-id."""
    parser.add_argument("--results", default=RESULTS, metavar="DIR",
                        help="results root: runs go to DIR/<run-id>/ (default results/)")
    if run_id_help is not None:
        parser.add_argument("--run-id", help=run_id_help)


def add_budget(parser, cycles_help="cycles in the whole plan"):
    """--max-cycles and --hours of a long run (nightly, soak)."""
    parser.add_argument("--max-cycles", type=int, metavar="N", help=cycles_help)
    parser.add_argument("--hours", type=float, metavar="H",
                        help="wall-clock budget of this invocation: no chunk of cycles starts that "
                             "would not end within it (a resumed run gets a new budget)")


def add_keep(parser, default):
    """--keep full|failures (lab.judge.keep_evidence)."""
    parser.add_argument("--keep", choices=("full", "failures"), default=default,
                        help="keep the full guest report and console lines of every cycle (full) or only of "
                             f"cycles that did not pass (failures; default {default})")


def add_lab_reruns(parser, default):
    """--lab-reruns N: lab.session.Session.cycles' reruns."""
    parser.add_argument("--lab-reruns", type=int, default=default, metavar="N",
                        help="run a cycle the lab failed (verdict error: a lab race, a crashed QEMU) again, "
                             "up to N times, after the plan; the error stays recorded and counted as the "
                             f"lab's (default {default})")


def add_engine(parser):
    """--engine libvirt|lava and the LAVA engine's options (lab/lava.py):
    the lavacli identity of the server, how many jobs at once, the device
    tags, and an HTTP server of the user's own for the run's artifacts.
    lab.request.from_args reads them (args.engine, args.lava_*)."""
    from lab.request import ENGINES
    parser.add_argument("--engine", choices=ENGINES, default=None,
                        help="libvirt: guests on this machine (default); lava: LAVA jobs on the server of "
                             "--lava-identity (modes mem/rtc, disk/platform, pm_test-*; ./pmlab lava up "
                             "brings up a lab here)")
    parser.add_argument("--lava-identity", metavar="NAME",
                        help="lavacli identity of the LAVA server (default pmlab, the one lab-up adds)")
    parser.add_argument("--lava-jobs", type=int, metavar="N",
                        help="LAVA jobs the plan is split into, run at once (default 2: one per worker)")
    parser.add_argument("--lava-tags", metavar="TAG[,TAG...]",
                        help="device tags the LAVA jobs ask for; exactly one names a machine profile "
                             "(default: --profile's, q35-ovmf)")
    parser.add_argument("--artifacts-url", dest="lava_artifacts_url", metavar="URL",
                        help="an HTTP server of your own that serves the run's artifacts directory "
                             "(RESULTS/<run-id>/artifacts); default: lab.run serves it itself, read-only, "
                             "on the address this machine reaches the LAVA server by")
