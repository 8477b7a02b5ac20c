# SPDX-License-Identifier: BSD-3-Clause
"""Man pages and shell completion generated from the argparse tree, so they cannot drift from the CLI.

`python -m fabscope.docgen --man DIR --bash-completion FILE --zsh-completion FILE
--fish-completion FILE` writes fabscope(1), one page per subcommand (fabscope-run(1), ...,
fabscope-testbed(1) with netns, softroce and slurm) and the completion scripts for bash, zsh and fish
(one set of tables, one walk per shell). `run` and `matrix` take their measurement options from the
engine's option table, so the engine must be found (FABSCOPE_ENGINE, or installed); --no-engine
leaves those options out and says so in the pages. The .deb build (packaging/debian/rules) runs this
against the engine it built.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__


@dataclass
class Command:
    """One node of the command tree: `fabscope`, `fabscope run`, `fabscope testbed netns up`, ..."""

    words: tuple[str, ...]  # ("fabscope", "testbed", "netns")
    summary: str
    parser: argparse.ArgumentParser | None  # None: a group of commands with no options of its own
    children: list[Command] = field(default_factory=list)

    @property
    def name(self) -> str:
        return " ".join(self.words)

    def walk(self) -> Iterator[Command]:
        yield self
        for child in self.children:
            yield from child.walk()


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand of parser, in the order --help lists them."""
    out: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def _tree(words: tuple[str, ...], summary: str, parser: argparse.ArgumentParser) -> Command:
    node = Command(words, summary, parser)
    for name, helptext, sub in _subparsers(parser):
        if helptext != argparse.SUPPRESS:
            node.children.append(_tree((*words, name), helptext, sub))
    return node


def command_tree(with_engine: bool = True) -> Command:
    """The whole CLI as users type it: the CLI's one parser tree."""
    from . import cli

    parser = cli.build_parser(with_engine=with_engine)
    return _tree(("fabscope",), parser.description or "", parser)


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)]


# --------------------------------------------------------------------------
# Man pages (roff, man(7) macros).


def _roff(text: str) -> str:
    """Text safe in roff: backslashes escaped, no line starting with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in text.splitlines())


def _action_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    return formatter._expand_help(action) if action.help else ""


def _action_label(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    if not action.option_strings:
        return "\\fI" + _roff(formatter._get_default_metavar_for_positional(action)
                              if action.metavar is None else str(action.metavar)) + "\\fR"
    if action.nargs == 0:
        return ", ".join(f"\\fB{_roff(o)}\\fR" for o in action.option_strings)
    args = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return ", ".join(f"\\fB{_roff(o)}\\fR \\fI{_roff(args)}\\fR" for o in action.option_strings)


def _usage(parser: argparse.ArgumentParser) -> str:
    usage = parser.format_usage().strip().removeprefix("usage:").strip()
    return re.sub(r"\s+", " ", usage)


def _page_name(cmd: Command) -> str:
    return "-".join(cmd.words)


def _sections(cmd: Command, level: str = ".SH") -> list[str]:
    """OPTIONS (per argument group) of cmd, then each nested command's usage and options."""
    out: list[str] = []
    parser = cmd.parser
    if parser is not None:
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if a in _options(parser)]
            if not actions:
                continue
            title = (group.title or "options").upper() if level == ".SH" else (group.title or "options")
            out.append(f"{level} {_roff(title)}" if level == ".SH" else f".PP\n\\fI{_roff(title)}\\fR")
            for action in actions:
                out += [".TP", _action_label(parser, action)]
                helptext = _action_help(parser, action)
                if action.choices and not isinstance(action, argparse._SubParsersAction) and "{" not in helptext:
                    helptext += f" (one of: {', '.join(map(str, action.choices))})"
                out.append(_roff(helptext) if helptext else "")
    for child in cmd.children:
        out.append(f".SH {_roff(child.name.upper())}" if level == ".SH" else f".SS {_roff(child.name)}")
        if child.summary:
            out += [".PP", _roff(child.summary)]
        if child.parser is not None:
            out += [".PP", f"\\fBusage:\\fR {_roff(_usage(child.parser))}"]
        out += _sections(child, ".SS")
    return out


def man_page(cmd: Command, root: Command, engine_note: str = "") -> str:
    """The man(7) page of cmd (fabscope itself, or one subcommand with its nested commands)."""
    title = _page_name(cmd).upper()
    out = [f'.TH {_roff(title)} 1 "" "fabscope {__version__}" "fabscope manual"',
           ".SH NAME", f"{_roff(_page_name(cmd))} \\- {_roff(cmd.summary.split(';')[0] if cmd.summary else cmd.name)}"]
    if cmd.parser is not None:
        out += [".SH SYNOPSIS", f".B {_roff(cmd.name)}", _roff(_usage(cmd.parser).removeprefix(cmd.name).strip())]
    else:
        out += [".SH SYNOPSIS"] + [f".B {_roff(c.name)}\n\\fI...\\fR\n.br" for c in cmd.children]
    description = (cmd.parser.description if cmd.parser is not None else None) or cmd.summary
    out += [".SH DESCRIPTION", _roff(description)]
    if engine_note and cmd.words[1:] in (("run",), ("matrix",)):
        out += [".PP", _roff(engine_note)]
    if cmd is root:
        out.append(".SH COMMANDS")
        for child in cmd.children:
            ref = f"See \\fB{_roff(_page_name(child))}\\fR(1)."
            out += [".TP", f"\\fB{_roff(child.words[-1])}\\fR", f"{_roff(child.summary.rstrip('.'))}. {ref}"]
        out += _sections(Command(cmd.words, cmd.summary, cmd.parser))  # its own options, not the children's
        out += [".SH EXIT STATUS", "0 success; 1 a measurement or step failed; 2 bad usage (the message names the "
                "argument, the value and what is allowed); other codes are listed in the subcommands' pages."]
    else:
        out += _sections(cmd)
    see = [root] + [c for c in root.children if c is not cmd] if cmd is not root else root.children
    out += [".SH SEE ALSO", ",\n".join(f"\\fB{_roff(_page_name(c))}\\fR(1)" for c in see)]
    return "\n".join(out) + "\n"


def engine_man_page(table: dict[str, Any]) -> str:
    """fabscope-engine(1) from the engine's option table (`--options-json`): the same rows its --help prints."""
    from .launch.engine import option_help

    out = [f'.TH FABSCOPE\\-ENGINE 1 "" "fabscope {__version__}" "fabscope manual"', ".SH NAME",
           "fabscope\\-engine, fabscope\\-engine\\-mpi\\-openmpi, fabscope\\-engine\\-mpi\\-mpich \\- the fabscope "
           "measurement engine", ".SH SYNOPSIS",
           ".B fabscope\\-engine\n\\fB\\-\\-peer\\fR \\fIHOST\\fR[:\\fIPORT\\fR] | \\fB\\-\\-listen\\fR "
           "\\fIADDR\\fR[:\\fIPORT\\fR] [\\fIoptions\\fR]",
           ".SH DESCRIPTION",
           _roff("The measurement engine that fabscope(1) starts: the timing loop, the statistics and the counters, "
                 "one JSON line per result. People use `fabscope run`; the engine's own options are the measurement "
                 "options of fabscope-run(1). The MPI builds run under mpirun or srun for `fabscope run --backend mpi`."),
           ".SH OPTIONS"]
    groups = [("core options", table["core"])] + [(f"{name} backend options", be["options"])
                                                    for name, be in table["backends"].items()]
    for title, rows in groups:
        out.append(f".SS {_roff(title)}")
        for row in rows:
            out += [".TP", f"\\fB{_roff('--' + row['name'])}\\fR \\fI{_roff(row['type'].upper())}\\fR",
                    _roff(option_help(row))]
    out += [".SH SEE ALSO", "\\fBfabscope\\fR(1), \\fBfabscope\\-run\\fR(1)"]
    return "\n".join(out) + "\n"


def write_man_pages(root: Command, directory: Path, engine_note: str = "",
                    engine_table: dict[str, Any] | None = None) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for cmd in [root, *root.children]:
        path = directory / f"{_page_name(cmd)}.1"
        path.write_text(man_page(cmd, root, engine_note))
        written.append(path)
    if engine_table is not None:
        path = directory / "fabscope-engine.1"
        path.write_text(engine_man_page(engine_table))
        written.append(path)
        for flavour in ("openmpi", "mpich"):  # the MPI builds share the page
            alias = directory / f"fabscope-engine-mpi-{flavour}.1"
            alias.write_text(".so man1/fabscope-engine.1\n")
            written.append(alias)
    return written


# --------------------------------------------------------------------------
# Shell completion (bash, zsh, fish): one set of tables from the tree, one small walker per shell.


@dataclass
class CompletionTables:
    """What every shell's completion knows, keyed by the command path as typed ("fabscope testbed netns"):
    its subcommands, its options, and the values of options with a fixed set of choices
    (key "fabscope run --format")."""

    subs: dict[str, list[str]]
    opts: dict[str, list[str]]
    choices: dict[str, list[str]]


def completion_tables(root: Command) -> CompletionTables:
    tables = CompletionTables({}, {}, {})
    for cmd in root.walk():
        key = cmd.name
        if cmd.children:
            tables.subs[key] = [c.words[-1] for c in cmd.children]
        if cmd.parser is not None:
            actions = _options(cmd.parser)
            tables.opts[key] = [o for a in actions for o in a.option_strings]
            for a in actions:
                if a.choices and a.option_strings:
                    for o in a.option_strings:
                        tables.choices[f"{key} {o}"] = [str(c) for c in a.choices]
    return tables


def _header(shell: str, flag: str) -> str:
    return (f"# {shell} completion for fabscope {__version__}: generated from its argparse tree by\n"
            f"# `python -m fabscope.docgen {flag} FILE`; do not edit.\n")


def _sh_assoc(declare: str, name: str, table: dict[str, list[str]]) -> str:
    """An associative array in bash/zsh syntax; values are space-separated words."""
    rows = "\n".join(f"    [{shlex.quote(k)}]={shlex.quote(' '.join(v))}" for k, v in sorted(table.items()))
    return f"{declare} {name}=(\n{rows}\n)"


def bash_completion(root: Command) -> str:
    """A bash completion script for `fabscope`: subcommands, their options, and the values of
    options with a fixed set of choices; anything else completes file names."""
    t = completion_tables(root)
    return _header("bash", "--bash-completion") + f"""{_sh_assoc("declare -gA", "_fabscope_subs", t.subs)}
{_sh_assoc("declare -gA", "_fabscope_opts", t.opts)}
{_sh_assoc("declare -gA", "_fabscope_choices", t.choices)}

_fabscope() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local path=fabscope w i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        if [[ -n ${{_fabscope_subs[$path]+x}} && " ${{_fabscope_subs[$path]}} " == *" $w "* ]]; then
            path="$path $w"
        fi
    done
    if [[ $prev == -* && -n ${{_fabscope_choices["$path $prev"]+x}} ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${{_fabscope_choices["$path $prev"]}}" -- "$cur")
    elif [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${{_fabscope_opts[$path]:-}}" -- "$cur")
    elif [[ -n ${{_fabscope_subs[$path]+x}} ]]; then
        mapfile -t COMPREPLY < <(compgen -W "${{_fabscope_subs[$path]}}" -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
}}
complete -o default -F _fabscope fabscope
"""


def zsh_completion(root: Command) -> str:
    """The zsh completion function `_fabscope` (a #compdef file for $fpath, e.g. Debian's
    /usr/share/zsh/vendor-completions/_fabscope; sourcing it after compinit works too): the same
    walk as bash's over the same tables."""
    t = completion_tables(root)
    return "#compdef fabscope\n" + _header("zsh", "--zsh-completion") + f"""{_sh_assoc("typeset -gA", "_fabscope_subs", t.subs)}
{_sh_assoc("typeset -gA", "_fabscope_opts", t.opts)}
{_sh_assoc("typeset -gA", "_fabscope_choices", t.choices)}

_fabscope() {{
    local cmdpath=fabscope w i
    local cur=${{words[CURRENT]}} prev=${{words[CURRENT-1]}}
    for ((i = 2; i < CURRENT; i++)); do
        w=${{words[i]}}
        if (( ${{+_fabscope_subs[$cmdpath]}} )) && [[ " ${{_fabscope_subs[$cmdpath]}} " == *" $w "* ]]; then
            cmdpath="$cmdpath $w"
        fi
    done
    if [[ $prev == -* ]] && (( ${{+_fabscope_choices[$cmdpath $prev]}} )); then
        compadd -- ${{=_fabscope_choices[$cmdpath $prev]}}
    elif [[ $cur == -* ]]; then
        compadd -- ${{=_fabscope_opts[$cmdpath]}}
    elif (( ${{+_fabscope_subs[$cmdpath]}} )); then
        compadd -- ${{=_fabscope_subs[$cmdpath]}}
    else
        _files
    fi
}}

if [[ $funcstack[1] == _fabscope ]]; then
    _fabscope "$@"
else
    compdef _fabscope fabscope
fi
"""


def fish_completion(root: Command) -> str:
    """The fish completion for `fabscope` (Debian: /usr/share/fish/vendor_completions.d/fabscope.fish):
    the same walk over the same tables, written as fish `switch` statements."""
    t = completion_tables(root)

    def lookup(name: str, table: dict[str, list[str]]) -> str:
        cases = "\n".join(f"        case {shlex.quote(k)}\n            printf '%s\\n' {' '.join(map(shlex.quote, v))}"
                          for k, v in sorted(table.items()) if v)
        return f"function {name}\n    switch $argv[1]\n{cases}\n        case '*'\n        return 1\n    end\nend\n"

    return _header("fish", "--fish-completion") + lookup("__fabscope_subs", t.subs) + \
        lookup("__fabscope_opts", t.opts) + lookup("__fabscope_choices", t.choices) + """
function __fabscope_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l cmdpath fabscope
    for w in $words[2..-1]
        if contains -- $w (__fabscope_subs "$cmdpath")
            set cmdpath "$cmdpath $w"
        end
    end
    set -l prev $words[-1]
    if string match -q -- '-*' $prev; and __fabscope_choices "$cmdpath $prev" >/dev/null
        __fabscope_choices "$cmdpath $prev"
    else if string match -q -- '-*' $cur
        __fabscope_opts "$cmdpath"
    else if __fabscope_subs "$cmdpath" >/dev/null
        __fabscope_subs "$cmdpath"
    else
        __fish_complete_path $cur
    end
end

complete -c fabscope -e
complete -c fabscope -f -a '(__fabscope_complete)'
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fabscope.docgen", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--man", type=Path, metavar="DIR", help="write fabscope.1 and fabscope-COMMAND.1 here")
    p.add_argument("--bash-completion", type=Path, metavar="FILE", help="write the bash completion script here")
    p.add_argument("--zsh-completion", type=Path, metavar="FILE", help="write the zsh completion (_fabscope) here")
    p.add_argument("--fish-completion", type=Path, metavar="FILE", help="write the fish completion here")
    p.add_argument("--no-engine", action="store_true",
                   help="leave out run's and matrix's measurement options (the engine's option table)")
    args = p.parse_args(argv)
    scripts: list[tuple[Path, Callable[[Command], str]]] = [
        (path, write) for path, write in ((args.bash_completion, bash_completion), (args.zsh_completion, zsh_completion),
                                          (args.fish_completion, fish_completion)) if path is not None]
    if args.man is None and not scripts:
        p.error("nothing to write: give --man DIR and/or --bash-completion/--zsh-completion/--fish-completion FILE")
    from .errors import FabscopeError

    try:
        root = command_tree(with_engine=not args.no_engine)
    except FabscopeError as exc:
        print(f"docgen: {exc.message} (or pass --no-engine to leave the engine's options out)", file=sys.stderr)
        return exc.exit_code
    note = ("The measurement options (the engine's option table) are not listed in this build of the page: "
            "`fabscope run --help` lists them.") if args.no_engine else ""
    if args.man is not None:
        table = None
        if not args.no_engine:
            from .launch.engine import option_table

            table = option_table()
        for path in write_man_pages(root, args.man, note, table):
            print(path)
    for path, write in scripts:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(write(root))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
