"""Render pmlab's LAVA files: the device dictionary (through Debian's
lava-server device-type templates) and the S3 job (job-s3.yaml).

  /usr/bin/python3 -m pipelines.lava.render --templates DEVICE_TYPES_DIR -o OUT_DIR
        [--artifacts build/out] [--cycles 3] [--rtc 2] [--memory 512]

writes OUT_DIR/device.jinja2 (the dictionary), OUT_DIR/device.yaml (it,
rendered: what lava-run --device takes) and OUT_DIR/job.yaml. The
device-types folder comes from pipelines/lava/install (never committed).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# pc (i440fx) + SeaBIOS: LAVA's qemu device type passes no -machine for
# amd64. QEMU 7.2 leaves S3 on for that machine (libvirt is what turns it
# off); disable_s3=0 says so explicitly, --no-s3 sets 1 (negative control).
# -device edu
# is the PCI device pmtest's edu driver binds, as in the lab's domains.
EXTRA_OPTIONS = ["-global PIIX4_PM.disable_s3=0", "-device edu", "-no-reboot"]
KERNEL_ARGS = "console=ttyS0,115200 no_console_suspend loglevel=6 rdinit=/bin/sh"


def device_dictionary(arch="amd64", no_kvm=True, memory=512, extra_options=None):
    """The device dictionary text (a Jinja2 file extending qemu.jinja2)."""
    options = EXTRA_OPTIONS if extra_options is None else extra_options
    lines = ["{% extends 'qemu.jinja2' %}",
             f"{{% set arch = '{arch}' %}}",
             f"{{% set no_kvm = {bool(no_kvm)} %}}",
             f"{{% set memory = {int(memory)} %}}",
             "{% set extra_options = [" + ", ".join(repr(o) for o in options) + "] %}"]
    return "\n".join(lines) + "\n"


def render_device(templates, dictionary_dir):
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([dictionary_dir, templates]),
                             trim_blocks=True, autoescape=False)
    return env.get_template("device.jinja2").render()


def render_job(artifacts, cycles, rtc_seconds, job_name=None, kernel_args=KERNEL_ARGS):
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    kernel = os.path.abspath(os.path.join(artifacts, "bzImage"))
    ramdisk = os.path.abspath(os.path.join(artifacts, "initramfs.cpio.gz"))
    # Per cycle under TCG: an RTC alarm of rtc_seconds, S3 through SeaBIOS,
    # the report: well under a minute; boot ~10 s.
    test_minutes = 2 + cycles * max(1, (rtc_seconds + 30) // 60 + 1)
    return env.get_template("job-s3.yaml").render(
        job_name=job_name or f"pmlab S3 x{cycles} (rtcwake {rtc_seconds}s)",
        kernel_url=f"file://{kernel}", ramdisk_url=f"file://{ramdisk}",
        kernel_args=kernel_args, cycles=cycles, rtc_seconds=rtc_seconds,
        boot_minutes=3, test_minutes=test_minutes, action_minutes=test_minutes,
        job_minutes=test_minutes + 8)


def render(templates, out_dir, artifacts, cycles=3, rtc_seconds=2, memory=512, job_name=None,
           extra_options=None):
    """Write device.jinja2, device.yaml and job.yaml into out_dir; return paths."""
    import yaml
    if not os.path.isfile(os.path.join(templates, "qemu.jinja2")):
        raise FileNotFoundError(f"{templates}/qemu.jinja2 missing: run pipelines/lava/install")
    for name in ("bzImage", "initramfs.cpio.gz"):
        if not os.path.isfile(os.path.join(artifacts, name)):
            raise FileNotFoundError(f"{artifacts}/{name} missing: build the kernel and initramfs first")
    os.makedirs(out_dir, exist_ok=True)
    dictionary = os.path.join(out_dir, "device.jinja2")
    with open(dictionary, "w") as out:
        out.write(device_dictionary(memory=memory, extra_options=extra_options))
    device = render_device(templates, out_dir)
    yaml.safe_load(device)  # fail here, not in lava-run, if it is not YAML
    device_path = os.path.join(out_dir, "device.yaml")
    with open(device_path, "w") as out:
        out.write(device)
    job = render_job(artifacts, cycles, rtc_seconds, job_name)
    yaml.safe_load(job)
    job_path = os.path.join(out_dir, "job.yaml")
    with open(job_path, "w") as out:
        out.write(job)
    return {"dictionary": dictionary, "device": device_path, "job": job_path}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m pipelines.lava.render", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--templates", required=True, help="lava-server's device-types folder")
    parser.add_argument("-o", "--out", required=True)
    parser.add_argument("--artifacts", default=os.path.join(REPO, "build", "out"))
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--rtc", type=int, default=2, help="RTC alarm seconds per cycle")
    parser.add_argument("--memory", type=int, default=512)
    parser.add_argument("--job-name")
    parser.add_argument("--no-s3", action="store_true",
                        help="negative control: PIIX4_PM.disable_s3=1 (every cycle must fail)")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.rtc < 1:
        parser.error("--cycles and --rtc must be at least 1")
    try:
        paths = render(args.templates, args.out, args.artifacts, args.cycles, args.rtc, args.memory,
                       args.job_name,
                       [o.replace("disable_s3=0", "disable_s3=1") for o in EXTRA_OPTIONS] if args.no_s3 else None)
    except (FileNotFoundError, ImportError) as error:
        print(f"lava/render: {error}", file=sys.stderr)
        return 2
    for key, path in paths.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
