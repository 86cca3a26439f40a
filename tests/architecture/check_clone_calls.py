#!/usr/bin/env python3
"""The AVX-512 and AVX2 copies of ag's kernels call no ag function compiled for the portable target.

AG_TARGET_CLONES (autograd/detail/target_clones.h) compiles a kernel once per instruction set; GCC
names the copies `f [clone .avx512f]`, `f [clone .avx2]` and `f`. A helper the kernel calls is
compiled into each copy only where it is inlined there. One left out of line — a function GCC
chose not to inline, a lambda called twice — is compiled once, for the portable x86-64 target
(SSE2), and every copy calls that: the kernel keeps its name and its results and loses its vectors.
ag's layer norm did so once, 1.5 times slower on AVX-512, with every test passing. So the kernels'
helpers are always inlined, and this check reads the compiled library to hold them to it: in each
AVX-512 or AVX2 copy, every call to a function of ag (a symbol in namespace ag) must be another
copy of that instruction set or one of ALLOWED — functions that pick the instruction set
themselves (the vector math's table) or that only raise an error.

    check_clone_calls.py --library LIBRARY [--objdump OBJDUMP]
    check_clone_calls.py --disassembly FILE        (the output of objdump -dr -C, for its test)

Exits 1, naming each copy and the function it calls, or 0 (and how many copies it read: none
read is an error too, since then the check would pass on anything).
"""
import argparse
import re
import subprocess
import sys

# Calls a copy may make to a function of ag compiled once: the vector math's dispatch (it calls the
# copy for this CPU, vector_math.h), and the cold paths of errors.
ALLOWED = [
    re.compile(r"^ag::detail::vec::functions\("),
    re.compile(r"^ag::detail::exp_shifted(_sum)?\("),
    re.compile(r"^(void )?ag::fail<"),
    re.compile(r"^ag::detail::fail_"),
    re.compile(r"^ag::[A-Za-z]*Error::"),
]

FUNCTION = re.compile(r"^[0-9a-f]+ <(.*)>:$")
CLONE = re.compile(r"\[clone \.(avx512f|avx2)\]")
CALL = re.compile(r"^\s*[0-9a-f]+:\s+call\s+(.*)$")
RELOCATION = re.compile(r"^\s*[0-9a-f]+:\s+R_X86_64_\w+\s+(.*?)(?:[-+]0x[0-9a-f]+)?$")
RESOLVED = re.compile(r"^[0-9a-f]+ <(.*)>$")


def calls_of_clones(lines):
    """(copy, callee) for every call in an AVX-512 or AVX2 copy: the callee from the call's
    relocation where the object file has one, else from the resolved address."""
    current = None
    pending = None  # a call whose target the next line (a relocation) may name
    for line in lines:
        line = line.rstrip("\n")
        header = FUNCTION.match(line)
        if header:
            if pending:
                yield pending
            pending = None
            name = header.group(1)
            current = name if CLONE.search(name) else None
            continue
        if current is None:
            continue
        relocation = RELOCATION.match(line)
        if relocation and pending:
            yield (current, relocation.group(1).strip())
            pending = None
            continue
        if pending:
            yield pending
            pending = None
        call = CALL.match(line)
        if call:
            target = call.group(1).strip()
            resolved = RESOLVED.match(target)
            # An unresolved call shows the copy itself plus an offset until its relocation line.
            callee = resolved.group(1) if resolved else target
            callee = re.sub(r"\+0x[0-9a-f]+$", "", callee)
            pending = (current, callee)
    if pending:
        yield pending


def offending(copy, callee):
    if not callee.startswith(("ag::", "void ag::")) and " ag::" not in callee.split("(")[0]:
        return False  # not ag's (libc, libm, SLEEF, the C++ library) or an indirect call
    if callee == copy:
        return False  # a call to itself (or its unresolved placeholder)
    isa = CLONE.search(copy).group(1)
    if f"[clone .{isa}]" in callee:
        return False  # another copy of the same instruction set
    return not any(pattern.search(callee) for pattern in ALLOWED)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--library")
    source.add_argument("--disassembly")
    parser.add_argument("--objdump", default="objdump")
    args = parser.parse_args()
    if args.library:
        result = subprocess.run([args.objdump, "-dr", "--no-show-raw-insn", "-C", args.library],
                                capture_output=True, text=True, check=True)
        lines = result.stdout.splitlines()
    else:
        with open(args.disassembly, encoding="utf-8") as f:
            lines = f.readlines()
    functions = [header.group(1) for header in map(FUNCTION.match, lines) if header]
    copies = {name for name in functions if CLONE.search(name)}
    problems = sorted({(copy, callee) for copy, callee in calls_of_clones(lines)
                       if offending(copy, callee)})
    for copy, callee in problems:
        print(f"{copy} calls {callee}, not a copy for its instruction set")
    if not copies:
        print("no AVX-512 or AVX2 copy found: nothing was checked")
        return 1
    print(f"{len(problems)} call(s) out of {len(copies)} AVX-512 and AVX2 copies" +
          (" (a helper left out of line is compiled for the portable target: inline it)"
           if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
