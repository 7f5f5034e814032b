#!/usr/bin/env python3
"""Checks that the code blocks of docs/embedding.md are still copies of examples/embed.

Each ```cpp or ```yaml block, cut at lines that are exactly "// ...", must appear piece by piece,
verbatim, in one of the example's files. Each line of a ```cmake block must be a line of the
example's CMakeLists.txt. Other blocks (shell commands) are not checked here.

usage: check_doc_snippets.py DOC EXAMPLE_DIR
"""
import pathlib
import re
import sys


def main() -> int:
    doc = pathlib.Path(sys.argv[1])
    example = pathlib.Path(sys.argv[2])
    sources = {p.name: p.read_text() for p in example.iterdir()
               if p.suffix in (".cc", ".h", ".yaml")}
    cmake_lines = {line.strip() for line in (example / "CMakeLists.txt").read_text().splitlines()}

    problems = []
    checked = 0
    for match in re.finditer(r"^```(\w+)\n(.*?)^```$", doc.read_text(), re.M | re.S):
        language, body = match.group(1), match.group(2)
        line_no = doc.read_text().count("\n", 0, match.start()) + 1
        if language in ("cpp", "yaml"):
            pieces = re.split(r"^// \.\.\.\n", body, flags=re.M)
            for piece in pieces:
                if piece.strip() and not any(piece in text for text in sources.values()):
                    first = piece.strip().splitlines()[0]
                    problems.append(f"{doc}:{line_no}: a {language} block is not in {example}: "
                                    f"the piece starting '{first}'")
                checked += 1
        elif language == "cmake":
            for line in body.splitlines():
                if line.strip() and line.strip() not in cmake_lines:
                    problems.append(f"{doc}:{line_no}: not in {example}/CMakeLists.txt: {line}")
                checked += 1
    if checked == 0:
        problems.append(f"{doc}: no code block checked")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
