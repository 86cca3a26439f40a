#!/usr/bin/env python3
"""Within one unity-built target, no two source files define the same internal name.

A unity build (CMake's CMAKE_UNITY_BUILD, set in CMakeLists.txt) compiles a target's .cpp files as
one translation unit, so each file's anonymous namespace and `static` functions meet the other
files'. A type, variable or same-signature function defined twice is a compile error; a function of
the same name and another signature is not: it joins an overload set, and a call in one file can
silently pick the other file's function; a using-declaration at namespace scope (`using
ag::viz::testing::run;`) likewise reaches every later file. This check refuses any name defined at
the top level of an anonymous namespace (or `static` at namespace scope), or brought in by a
using-declaration, in more than one file of a target (the same using-declaration repeated is
allowed). It reads declarations by pattern, not by parsing C++: a second declarator of one
statement (`int a = 1, b = 2;`) is not seen, but redefined variables and types fail to compile.

    check_unity_names.py TARGETS_FILE

TARGETS_FILE (written by tests/CMakeLists.txt) has one line per unity-built target:
"<target>;<source>;<source>...". Exits 1, naming each duplicated name and its files, or 0.
"""
import re
import sys


def code_only(text):
    """The text with comments, string and character literals and preprocessor lines blanked
    (lines kept)."""
    token = re.compile(r'//[^\n]*|/\*.*?\*/|R"([^(]*)\(.*?\)\1"|"(\\.|[^"\\\n])*"|'
                       r"'(\\.|[^'\\\n])*'|^[ \t]*#(\\\n|[^\n])*", re.S | re.M)
    return token.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


KEYWORDS = {"const", "constexpr", "inline", "static", "noexcept", "operator", "return", "if",
            "for", "while", "switch", "template", "typename", "namespace", "extern", "auto",
            "void", "int", "double", "float", "bool", "char", "long", "unsigned", "signed",
            "override", "final", "default", "delete", "decltype", "sizeof", "alignas",
            "thread_local", "mutable", "volatile", "explicit", "friend", "noreturn", "nodiscard",
            "maybe_unused", "gnu", "always_inline"}


def declared_name(statement):
    """The name a top-level declaration declares: its type's name, alias or the last identifier
    before its first '(', '=', '{', ';' or end (skipping attributes and template heads)."""
    statement = re.sub(r"\[\[.*?\]\]", " ", statement)
    statement = re.sub(r"^\s*template\s*<.*?>\s*(?=[A-Za-z_])", " ", statement, flags=re.S)
    m = re.search(r"\b(?:struct|class|enum(?:\s+class)?|union)\s+(\w+)", statement)
    if m and statement.lstrip().split()[0] in ("struct", "class", "enum", "union"):
        return m.group(1)
    m = re.match(r"\s*using\s+(\w+)\s*=", statement)
    if m:
        return m.group(1)
    if re.match(r"\s*(using|namespace|static_assert|template)\b", statement):
        return None
    head = re.split(r"[(={;]", statement, maxsplit=1)[0]
    head = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", " ", head)  # template arguments
    names = [n for n in re.findall(r"[A-Za-z_]\w*", head) if n not in KEYWORDS]
    if head.rstrip().endswith("operator") or "operator" in head.split():
        return None  # an operator overload's meaning is its types
    return names[-1] if names else None


def internal_names(path):
    """{(namespace, name): (line, entity)} for the names defined at the top level of the file's
    anonymous namespaces, its `static` functions and variables at namespace scope (entity None),
    and its using-declarations (entity the name they bring in); namespace is the enclosing named
    namespaces, "ag::nn" (names in different namespaces do not meet)."""
    with open(path, encoding="utf-8") as f:
        text = code_only(f.read())
    names = {}
    scopes = []  # for each open brace: ("anon", ""), ("namespace", its name) or ("other", "")
    statement_start = 0

    def at_namespace_scope():
        return all(kind != "other" for kind, _ in scopes)

    def record(statement, offset):
        namespace = "::".join(n for kind, n in scopes if kind == "namespace")
        line = text.count("\n", 0, offset + len(statement) - len(statement.lstrip())) + 1
        using = re.fullmatch(r"\s*using\s+((?:\w+::)+)(\w+)\s*", statement)
        if using:  # a using-declaration: the name joins every later file's lookups too
            names.setdefault((namespace, using.group(2)), (line, using.group(1) + using.group(2)))
            return
        in_anon = any(kind == "anon" for kind, _ in scopes)
        is_static = re.match(r"\s*(\[\[.*?\]\]\s*)*(template\s*<.*?>\s*)?(inline\s+)?static\b",
                             statement, re.S)
        if not statement.strip() or not (in_anon or is_static):
            return
        name = declared_name(statement)
        if name:
            names.setdefault((namespace, name), (line, None))

    for i, c in enumerate(text):
        if c == "{":
            before = text[statement_start:i]
            named = re.search(r"\bnamespace\s+([\w:]+)\s*$", before)
            if re.search(r"\bnamespace\s*$", before):
                scope = ("anon", "")
            elif named:
                scope = ("namespace", named.group(1))
            else:
                scope = ("other", "")
                if at_namespace_scope():
                    record(before, statement_start)
            scopes.append(scope)
            statement_start = i + 1
        elif c == "}":
            if scopes:
                scopes.pop()
            if at_namespace_scope():
                statement_start = i + 1
        elif c == ";" and at_namespace_scope():
            record(text[statement_start:i], statement_start)
            statement_start = i + 1
    return names


def main():
    if len(sys.argv) != 2:
        print("usage: check_unity_names.py TARGETS_FILE", file=sys.stderr)
        return 2
    problems = []
    targets = 0
    with open(sys.argv[1], encoding="utf-8") as f:
        for row in f:
            fields = row.strip().split(";")
            if len(fields) < 3:
                continue
            targets += 1
            target, sources = fields[0], [s for s in fields[1:] if s.endswith(".cpp")]
            where = {}
            for source in sources:
                for (namespace, name), (line, entity) in internal_names(source).items():
                    where.setdefault((namespace, name), []).append((f"{source}:{line}", entity))
            for (namespace, name), found in sorted(where.items()):
                places = [place for place, _ in found]
                entities = {entity for _, entity in found}
                same_using = len(entities) == 1 and None not in entities  # one name, declared again
                if len(places) > 1 and not same_using:
                    qualified = f"{namespace}::{name}" if namespace else name
                    problems.append(f"{target}: '{qualified}' is defined in " + ", ".join(places))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_unity_names: {len(problems)} internal name(s) defined in more than one "
              "file of a unity-built target; give each its own name", file=sys.stderr)
        return 1
    print(f"check_unity_names: {targets} unity-built targets of several files, no internal name "
          "defined twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
