#!/usr/bin/env python3
"""The code's shape limits, checked on the source tree:
- no file under src/, apps/, examples/ over 500 lines;
- no function there over 80 lines, but a declarative table (a comment on the line before the
  function says "declarative table");
- an environment variable's name as a string literal only in include/ddp/environment.h (the
  library's) and apps/common/app_environment.h (the programs' own), which name each once (src/,
  apps/, examples/, bench/, include/, fuzz/): neither a name they list nor any literal given to
  getenv, setenv, unsetenv or putenv.
Functions are found as clang-format lays them out: a definition's body opens at the end of a
line and closes with a "}" alone at the indentation that line started with.
usage: check_shape.py SOURCE_DIR"""
import pathlib
import re
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
SCOPE = re.compile(r"^\s*(namespace|class|struct|union|enum|extern)\b|=\s*\{$|\)\s*=\s*default")


def functions(lines):
    """(first line, last line, signature) of each function body in a clang-formatted file."""
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if line.rstrip().endswith("{") and indent <= 2 and not SCOPE.search(line):
            start = i  # the signature may begin on earlier lines
            while start > 0 and lines[start - 1].strip() and not re.search(r"[;{}]\s*$|^\s*(//|#)", lines[start - 1]):
                start -= 1
            if "(" in "".join(lines[start : i + 1]):
                end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == " " * indent + "}"), None)
                if end is not None:
                    found.append((start, end, lines[start].strip()))
                    i = end
        i += 1
    return found


def main(root):
    root = pathlib.Path(root)
    problems = []
    env_headers = [root / "include/ddp/environment.h", root / "apps/common/app_environment.h"]
    names = [name for header in env_headers
             for name in re.findall(r'inline constexpr char k\w+\[\] = "([^"]+)";', header.read_text())]
    literal = re.compile(r'"(%s)=?[^"\w]*"' % "|".join(map(re.escape, names)))
    env_call = re.compile(r'\b(getenv|setenv|unsetenv|putenv)\s*\(\s*"([^"]*)"')
    for folder in ["src", "apps", "examples", "bench", "include", "fuzz"]:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in {".cpp", ".h"} or path in env_headers:
                continue
            lines = path.read_text().split("\n")
            rel = path.relative_to(root)
            for number, line in enumerate(lines, 1):
                code = re.sub(r"^\s*//.*|\s//.*$", "", line)  # comments, not "tcp://"
                found = [m.group(1) for m in literal.finditer(code)]
                found += [m.group(2) for m in env_call.finditer(code)]
                for name in found:
                    problems.append(f"{rel}:{number}: the environment variable {name} as a "
                                    "literal: name it once in include/ddp/environment.h or apps/common/app_environment.h")
            if folder in {"bench", "include", "fuzz"}:
                continue
            if len(lines) - 1 > MAX_FILE_LINES:
                problems.append(f"{rel}: {len(lines) - 1} lines, over {MAX_FILE_LINES}: split it by concept")
            for start, end, signature in functions(lines):
                length = end - start + 1
                table = start > 0 and "declarative table" in lines[start - 1]
                if length > MAX_FUNCTION_LINES and not table:
                    problems.append(f"{rel}:{start + 1}: {signature} is {length} lines, over "
                                    f"{MAX_FUNCTION_LINES}: split it into named steps")
    for problem in problems:
        print(problem)
    print(f"check_shape: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
