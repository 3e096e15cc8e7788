"""Command lines generated from config dataclasses: every field an option, with its type, default and
the one line of help its class's docstring gives it (``Attributes:``), so the help cannot drift;
a field whose ``metadata`` holds ``choices`` lists them.

``add_config_options(parser, Config)`` adds ``--field-name value`` (also ``--field-name=value``, and
``--field_name`` as older records spell it) for each field, ``--flag``/``--no-flag`` for booleans;
integers take ``1e3``; ``none`` is None where a field allows it.
A parser built on ``OptionParser`` raises ``OptionError`` instead of exiting, so a caller collects
every refusal before any work and ``refuse`` prints it as argparse does (one line, exit code 2).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import re
import sys
import textwrap
import typing


class OptionError(ValueError):
    """A command line that an ``OptionParser`` refused (its message is argparse's)."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, without breaking a word at its hyphen (``group-valued``, ``n_aware``)."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class DefaultsHelpFormatter(HelpFormatter):
    """``HelpFormatter`` that ends each option's help with its default, where it has one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS)) \
                or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """The parser of the entry point ``python -m module``: described by the first paragraph of the
    module's docstring ``doc``, each option's default in its help; errors exit with code 2."""

    def __init__(self, module, doc, **kwargs):
        super().__init__(prog=f"python -m {module}", description=doc.split("\n\n")[0].replace("``", ""),
                         formatter_class=DefaultsHelpFormatter, allow_abbrev=False, **kwargs)

    @contextlib.contextmanager
    def refusals(self, *errors):
        """Inside, an exception of ``errors`` (default ValueError, TypeError, OSError) is argparse's
        one-line refusal with exit code 2: for the checks a command makes before any work."""
        try:
            yield
        except errors or (ValueError, TypeError, OSError) as error:
            self.error(" ".join(str(error).split()))


class OptionParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors raise ``OptionError`` (``--help`` still exits 0)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, formatter_class=HelpFormatter, allow_abbrev=False, **kwargs)

    def error(self, message):
        raise OptionError(message)


def refuse(parser, error):
    """Print ``error`` as argparse does, ``prog: error: message`` on one line, and exit with code 2."""
    parser.print_usage(sys.stderr)
    parser.exit(2, f"{parser.prog}: error: {' '.join(str(error).split())}\n")


def field_help(config_class):
    """``{field: one line}`` from the ``Attributes:`` sections of ``config_class`` and its bases."""
    lines = {}
    for cls in reversed(config_class.__mro__):
        doc = inspect.getdoc(cls) if "__doc__" in vars(cls) else None
        section = re.search(r"^Attributes:\n((?:[ \t]+.*\n?|\n)+)", doc or "", re.MULTILINE)
        if section is None:
            continue
        for entry in re.split(r"\n(?=    [A-Za-z_][\w, ]*:)", "\n" + section.group(1)):
            names, _, text = entry.strip().partition(":")
            for name in (n.strip() for n in names.split(",")):
                lines[name] = " ".join(text.split())
    return lines


def _kinds(kind):
    return typing.get_args(kind) or (kind,)


def value_parser(kind):
    """The parser of one command-line value of the field type ``kind`` (``int``, ``float | None``, ...)."""
    kinds = _kinds(kind)

    def parse(text):
        if type(None) in kinds and text.lower() == "none":
            return None
        if bool in kinds:
            if text.lower() not in ("true", "false"):
                raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
            return text.lower() == "true"
        if int in kinds:
            try:
                number = float(text)
            except ValueError:
                number = None
            if number is not None and number.is_integer():
                return int(text) if re.fullmatch(r"[+-]?\d+", text.strip()) else int(number)
            if float not in kinds:
                raise argparse.ArgumentTypeError(f"expected an integer (such as 1000 or 1e3), got {text!r}")
        if float in kinds:
            try:
                return float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        return text
    parse.__name__ = _type_name(kind)
    return parse


def _type_name(kind):
    names = [k.__name__ for k in _kinds(kind) if k is not type(None)]
    return " | ".join(names) + (" | none" if type(None) in _kinds(kind) else "")


def add_config_options(parser, config_class, title, excluded=()):
    """Add every field of ``config_class`` but ``excluded`` to ``parser`` as an option of a group named
    ``title``; an option not given is absent from the parsed namespace (the config's default holds)."""
    hints = typing.get_type_hints(config_class)
    help_lines = field_help(config_class)
    group = parser.add_argument_group(title)
    for field in dataclasses.fields(config_class):
        if field.name in excluded:
            continue
        flag, kind = "--" + field.name.replace("_", "-"), hints[field.name]
        default = "required" if field.default is dataclasses.MISSING else f"default: {field.default}"
        line = help_lines.get(field.name, "").replace("``", "").replace("%", "%%")
        choices = field.metadata.get("choices")  # listed here; the config refuses any other value itself
        listed = f"one of {', '.join(map(str, choices))}; " if choices else ""
        text = f"{line} ({listed}{_type_name(kind)}; {default})".lstrip()
        for spelling, shown in [(flag, text)] + ([("--" + field.name, argparse.SUPPRESS)] if "_" in field.name else []):
            if bool in _kinds(kind):
                group.add_argument(spelling, dest=field.name, nargs="?", const=True, type=value_parser(kind),
                                   default=argparse.SUPPRESS, metavar="true|false", help=shown)
                group.add_argument("--no-" + spelling[2:], dest=field.name, action="store_const", const=False,
                                   default=argparse.SUPPRESS, help=argparse.SUPPRESS)
            else:
                group.add_argument(spelling, dest=field.name, type=value_parser(kind), default=argparse.SUPPRESS,
                                   metavar=_type_name(kind).replace(" ", "").upper(), help=shown)
    return group


def name_options(message, options):
    """``message`` led by the given options it is about (``--n 0: n must be at least 1, got 0``)."""
    if re.search(r"(^|\s)--\w", message):  # it names its options itself
        return message
    named = [f"--{name.replace('_', '-')} {value}" for name, value in options.items()
             if re.search(rf"\b{re.escape(name)}\b", message)]
    return f"{', '.join(named)}: {message}" if named else message
