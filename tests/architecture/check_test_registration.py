#!/usr/bin/env python3
"""Every Catch2 test case is a ctest test, and every discovered ctest test runs one.

catch_discover_tests (tests/CMakeLists.txt's ag_discover_tests) registers one ctest test per line
of `<program> --list-test-names-only`, with the name as its test spec. Two kinds of name break it
without a word: a ';' cuts the name into two tests (CMake's list separator), and an unbalanced '['
has made it register no further test case of the program. Each such test matches no test case,
and Catch2 then says "No tests ran" and exits with 0, which ctest counts as passed.

This check compares, for each program, the names the program lists with the tests ctest has: a
test case that no test runs, and a discovered test (its ctest name is its unescaped spec) that
matches no test case, are both errors. Tests added by hand (add_test with a tag) are left alone.

    check_test_registration.py --programs FILE (--ctest CTEST --build-dir DIR | --ctest-json FILE)

FILE lists the programs, one path a line (tests/CMakeLists.txt writes it); ctest's list comes from
`CTEST --show-only=json-v1` run in DIR, or from a saved copy of that JSON (the check's own test).
Exits 1 when anything is missing, after naming each case.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def unescape_spec(spec):
    """The test name a discovered test's spec stands for: CatchAddTests.cmake puts a backslash
    before each ',', '[' and ']' of the name (Catch2's test spec syntax)."""
    return re.sub(r"\\([,\[\]])", r"\1", spec)


def listed_names(program):
    """The test cases `program` says it has (hidden ones, tagged [.], are not listed)."""
    result = subprocess.run([program, "--list-test-names-only"], capture_output=True, text=True,
                            cwd=os.path.dirname(program) or ".", check=False)
    # Catch2 2's --list-test-names-only exits with the number of test cases listed (mod 256)
    if result.returncode < 0:
        sys.exit(f"{program} --list-test-names-only: killed by signal {-result.returncode}")
    return [line for line in result.stdout.splitlines() if line.strip()]


def discovered_specs(tests, program):
    """The specs of the ctest tests that discovery made for `program`: those whose ctest name is
    the test name their spec stands for."""
    specs = []
    for test in tests:
        command = test.get("command") or []
        if len(command) >= 2 and os.path.realpath(command[0]) == os.path.realpath(program):
            if test.get("name") == unescape_spec(command[1]):
                specs.append(command[1])
    return specs


def why(name):
    if ";" in name:
        return " (its ';' cuts the name in two: use another mark)"
    if name.count("[") != name.count("]"):
        return " (an unbalanced '[': discovery stops there)"
    return ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", required=True)
    parser.add_argument("--ctest")
    parser.add_argument("--build-dir")
    parser.add_argument("--ctest-json")
    args = parser.parse_args()

    if args.ctest_json:
        with open(args.ctest_json, encoding="utf-8") as file:
            listing = json.load(file)
    else:
        result = subprocess.run([args.ctest, "--show-only=json-v1"], capture_output=True,
                                text=True, cwd=args.build_dir, check=True)
        listing = json.loads(result.stdout)
    tests = listing.get("tests", [])

    with open(args.programs, encoding="utf-8") as file:
        programs = [line.strip() for line in file if line.strip()]
    problems = 0
    counted = 0
    for program in programs:
        names = listed_names(program)
        registered = {unescape_spec(spec) for spec in discovered_specs(tests, program)}
        counted += len(names)
        label = os.path.basename(program)
        for name in names:
            if name not in registered:
                print(f"{label}: test case '{name}' is not a ctest test{why(name)}")
                problems += 1
        for name in sorted(registered - set(names)):
            print(f"{label}: ctest test '{name}' runs no test case")
            problems += 1
    print(f"{problems} problem(s) in {len(programs)} program(s), {counted} test case(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
