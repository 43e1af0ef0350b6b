# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CPU detection and the llama.cpp (ggml) compiler flags that match a CPU.

One place for the mapping from /proc/cpuinfo to CMake arguments: the cpu_features module returns it,
the llama_build role records it, and receiving hosts are checked against it.
"""

from __future__ import annotations

import hashlib

# Arm: the hwcaps (Linux /proc/cpuinfo names) that code built with -march=<base>+<ext>... may use.
# Each base level includes the ones before it. gcc 12's armv9-a also turns on fp16 arithmetic.
ARM_BASE_FEATURES = (
    ("armv8-a", ("asimd",)),
    ("armv8.1-a", ("atomics", "asimdrdm")),
    ("armv8.2-a", ("dcpop",)),
    ("armv8.3-a", ("lrcpc", "jscvt", "fcma")),
    ("armv8.4-a", ("asimddp", "ilrcpc", "dit", "uscat", "flagm")),
    ("armv8.5-a", ("frint", "sb", "flagm2")),
    ("armv9-a", ("sve", "sve2", "fphp", "asimdhp")),
)
ARM_EXTENSION_FEATURES = {
    "dotprod": ("asimddp",),
    "fp16": ("fphp", "asimdhp"),
    "sve": ("sve",),
    "sve2": ("sve", "sve2"),
    "i8mm": ("i8mm",),
    "bf16": ("bf16",),
    "crypto": ("aes", "pmull", "sha1", "sha2"),
}
# With SVE, the int8-matmul and bf16 extensions also cover their SVE forms.
ARM_SVE_FORMS = {"i8mm": "svei8mm", "bf16": "svebf16"}

# The build tiers, best first: a CPU gets the first one whose features it has all of. The flags follow
# the features, not the part number, so an unknown core gets the best tier it supports.
# (gcc 12 does not know -mcpu=neoverse-v2, hence -march strings.)
ARM_TIERS = (
    ("armv9-a+i8mm+bf16", "Graviton4, Neoverse V2: SVE2 (128-bit), int8 matmul, bf16"),
    ("armv8.4-a+sve+i8mm+bf16+fp16", "Graviton3, Neoverse V1: SVE (256-bit), int8 matmul, bf16, fp16"),
    ("armv8.2-a+dotprod+fp16", "Graviton2, Neoverse N1: NEON with dot product and fp16"),
    ("armv8-a", "any 64-bit Arm: NEON"),
)


def arm_arch_features(arm_arch):
    """The hwcaps a host needs to run code built with -march=arm_arch (sorted)."""
    base, dummy, extensions = arm_arch.strip().lower().partition("+")
    levels = [level[0] for level in ARM_BASE_FEATURES]
    if base not in levels:
        raise CpuInfoError("-march base %r is not one of %s" % (base, ", ".join(levels)))
    needed = set()
    for name, features in ARM_BASE_FEATURES[:levels.index(base) + 1]:
        needed.update(features)
    for extension in [e for e in extensions.split("+") if e]:
        if extension not in ARM_EXTENSION_FEATURES:
            raise CpuInfoError("-march extension %r is not one of %s" % (extension, ", ".join(sorted(ARM_EXTENSION_FEATURES))))
        needed.update(ARM_EXTENSION_FEATURES[extension])
    if "sve" in needed:
        needed.update(ARM_SVE_FORMS[e] for e in ARM_SVE_FORMS if e in needed)
    return sorted(needed)


# What llama.cpp's system_info must then show as 1 (ggml-cpu feature names), per -march tier
# (checked against gcc 12's predefined macros for each -march).
ARM_SYSTEM_INFO = {
    "armv9-a+i8mm+bf16": ("NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE"),
    "armv8.4-a+sve+i8mm+bf16+fp16": ("NEON", "ARM_FMA", "FP16_VA", "DOTPROD", "MATMUL_INT8", "SVE"),
    "armv8.2-a+dotprod+fp16": ("NEON", "ARM_FMA", "FP16_VA", "DOTPROD"),
    "armv8-a": ("NEON", "ARM_FMA"),
}

# x86_64: ggml CMake option -> cpuinfo flags it needs. Explicit options instead of -march=native, so a
# build made on one host runs on every host with the same flags.
X86_OPTIONS = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
)
X86_SYSTEM_INFO = {
    "GGML_SSE42": "SSE3", "GGML_AVX": "AVX", "GGML_AVX2": "AVX2", "GGML_BMI2": "BMI2", "GGML_FMA": "FMA",
    "GGML_F16C": "F16C", "GGML_AVX_VNNI": "AVX_VNNI", "GGML_AVX512": "AVX512", "GGML_AVX512_VBMI": "AVX512_VBMI",
    "GGML_AVX512_VNNI": "AVX512_VNNI", "GGML_AVX512_BF16": "AVX512_BF16",
}

# Arm cores by (implementer, part). Neoverse V2 is Graviton4 on EC2 but also NVIDIA Grace and others,
# so the Graviton name is given only where the DMI vendor says Amazon EC2.
ARM_CORES = {
    ("0x41", "0xd0c"): ("Neoverse N1", "Graviton2"),
    ("0x41", "0xd40"): ("Neoverse V1", "Graviton3"),
    ("0x41", "0xd4f"): ("Neoverse V2", "Graviton4"),
    ("0x41", "0xd49"): ("Neoverse N2", None),
    ("0x41", "0xd84"): ("Neoverse V3", None),
    ("0x41", "0xd8e"): ("Neoverse N3", None),
}
ARM_ALIASES = {"aarch64", "arm64"}
X86_ALIASES = {"x86_64", "amd64"}


class CpuInfoError(ValueError):
    """The cpuinfo text cannot be understood for the given architecture."""


def parse_cpuinfo(text):
    """Return the fields of the first processor block of /proc/cpuinfo, keys lower-cased."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def normalize_architecture(machine):
    machine = (machine or "").strip().lower()
    if machine in ARM_ALIASES:
        return "aarch64"
    if machine in X86_ALIASES:
        return "x86_64"
    return machine


def _short_hash(values):
    return hashlib.sha256("\n".join(values).encode()).hexdigest()[:8]


def best_arm_arch(features):
    """The best ARM_TIERS -march the features support (None: no NEON, not a CPU llama.cpp runs on)."""
    for tier in ARM_TIERS:
        if set(arm_arch_features(tier[0])) <= set(features):
            return tier[0]
    return None


def _x86_option_overrides(extra_cmake_args):
    """{GGML option: bool} for the X86_OPTIONS that extra CMake arguments set explicitly."""
    known = {option[0] for option in X86_OPTIONS}
    overrides = {}
    for arg in extra_cmake_args:
        name, sep, value = arg[2:].partition("=") if arg.startswith("-D") else ("", "", "")
        name = name.split(":")[0]
        if sep and name in known:
            overrides[name] = value.strip().upper() in ("ON", "1", "TRUE", "YES")
    return overrides


def describe_cpu(cpuinfo_text, machine, dmi_vendor="", arm_arch=None, native=False, extra_cmake_args=()):
    """Detect the CPU and the llama.cpp build flags that match it.

    arm_arch overrides the -march tier on aarch64; native builds with -mcpu/-march=native instead;
    extra_cmake_args are appended (x86 GGML_* options there override the detected ones).
    Returns a dict: architecture, features (sorted), cpu_name, core, vendor, arm_arch (None on x86),
    cmake_args, required_features (what a host needs to run the build), missing_features (what this
    CPU lacks of those: non-empty means the flags do not fit it), system_info (the ggml features
    llama.cpp must report as 1), target_id (same value = same binaries), build_args (the extra_cmake_args
    that are not CPU options: they change what is built on every CPU alike).
    """
    architecture = normalize_architecture(machine)
    fields = parse_cpuinfo(cpuinfo_text)
    on_ec2 = "amazon" in (dmi_vendor or "").lower()
    extra_cmake_args = list(extra_cmake_args or ())
    if arm_arch and architecture != "aarch64":
        raise CpuInfoError("an Arm -march (%s) was given for a %s host" % (arm_arch, architecture))

    if architecture == "aarch64":
        features = set(fields.get("features", "").split())
        if not features:
            raise CpuInfoError("no 'Features' line in cpuinfo: is this really an aarch64 /proc/cpuinfo?")
        best = best_arm_arch(features)
        if best is None:
            raise CpuInfoError("the CPU lacks Advanced SIMD (asimd/NEON), which llama.cpp needs on aarch64")
        key = (fields.get("cpu implementer", "").lower(), fields.get("cpu part", "").lower())
        core, graviton = ARM_CORES.get(key, (None, None))
        cpu_name = graviton if (graviton and on_ec2) else (core or "generic aarch64")
        vendor = "Amazon" if (graviton and on_ec2) else ("Arm" if core else fields.get("cpu implementer", "unknown"))
        arm_arch = (arm_arch or best).strip().lower()
        cmake_args = ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=" + arm_arch]
        required = arm_arch_features(arm_arch)
        system_info = list(ARM_SYSTEM_INFO.get(arm_arch, ("NEON", "ARM_FMA")))
    elif architecture == "x86_64":
        features = set(fields.get("flags", "").split())
        if not features:
            raise CpuInfoError("no 'flags' line in cpuinfo: is this really an x86_64 /proc/cpuinfo?")
        overrides = _x86_option_overrides(extra_cmake_args)
        core = None
        cmake_args = ["-DGGML_NATIVE=OFF"]
        required_set = set()
        system_info = []
        for option, needs in X86_OPTIONS:
            enabled = overrides.get(option, set(needs) <= features)
            cmake_args.append("-D%s=%s" % (option, "ON" if enabled else "OFF"))
            if enabled:
                required_set.update(needs)
                system_info.append(X86_SYSTEM_INFO[option])
        # the explicit settings above take the place of the same options in extra_cmake_args
        extra_cmake_args = [a for a in extra_cmake_args if not _x86_option_overrides([a])]
        required = sorted(required_set)
        cpu_name = fields.get("model name", "generic x86_64")
        vendor = fields.get("vendor_id", "unknown")
    else:
        raise CpuInfoError("architecture %r is not supported: llama_build knows aarch64 and x86_64" % machine)

    if native:
        # -mcpu=native may use anything this CPU has: only an identical CPU may run the build.
        cmake_args = ["-DGGML_NATIVE=ON"]
        required = sorted(features)
        arm_arch = None
        target_key = ["native", fields.get("cpu part", ""), fields.get("model", "")] + required
    else:
        target_key = list(cmake_args)
    cmake_args = cmake_args + extra_cmake_args

    return {
        "architecture": architecture,
        "features": sorted(features),
        "cpu_name": cpu_name,
        "core": core,
        "vendor": vendor,
        "arm_arch": arm_arch,
        "cmake_args": cmake_args,
        "required_features": required,
        "missing_features": missing_features(required, features),
        "system_info": system_info,
        "target_id": "%s-%s" % (architecture, _short_hash(target_key + extra_cmake_args)),
        "build_args": extra_cmake_args,
    }


def missing_features(required, features):
    """Features a build requires that a host lacks (sorted; empty when the host can run the build)."""
    return sorted(set(required) - set(features))


def build_refusal(record, cpu):
    """Why a build (its build-record.json, as a dict) must not run on a CPU (a describe_cpu result).

    None when the CPU has every feature the build was compiled for. Started on a CPU that lacks one,
    the build would die with an illegal instruction, at start-up or mid-inference.
    """
    lacking = missing_features(record.get("required_features", []), cpu["features"])
    if not lacking:
        return None
    flags = [arg for arg in record.get("cmake_args", []) if arg.startswith("-DGGML_CPU_ARM_ARCH") or arg == "-DGGML_NATIVE=ON"]
    return "build %s was compiled for %s (%s) and needs CPU features that this CPU (%s) lacks: %s" % (
        record.get("id", "?"), record.get("cpu", {}).get("name", "?"), " ".join(flags) or "x86 options",
        cpu["cpu_name"], ", ".join(lacking))
