"""What makes a shared object an allocator: it defines malloc and friends itself.

Preloading a library that does not (libz, a typo'd path to some other .so) changes
nothing about the server's allocator, yet the run would report it as a setup with its
own name and version. The library's dynamic symbol table is read with pyelftools, so no
tool (nm, readelf) needs to be installed and no process is started.
"""

from __future__ import annotations

from mallocbench.errors import MallocbenchError

REQUIRED = ("malloc", "free", "calloc", "realloc")
_FUNCTION_TYPES = ("STT_FUNC", "STT_GNU_IFUNC")
_EXPORTED = ("STB_GLOBAL", "STB_WEAK")


def defined_functions(path: str, names: tuple[str, ...] = REQUIRED) -> set[str]:
    """Those of `names` that `path` defines (not merely imports) as exported functions."""
    # Imported here: only a custom library path needs it, not every command's start.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with open(path, "rb") as handle:
            elf = ELFFile(handle)
            if elf["e_type"] != "ET_DYN":
                raise MallocbenchError(
                    f"allocator library {path} is not a shared object: give a malloc .so"
                )
            found: set[str] = set()
            for section in elf.iter_sections():
                if section["sh_type"] != "SHT_DYNSYM" or not isinstance(
                    section, SymbolTableSection
                ):
                    continue
                for symbol in section.iter_symbols():
                    if (
                        symbol.name in names
                        and symbol["st_shndx"] != "SHN_UNDEF"
                        and symbol["st_info"]["type"] in _FUNCTION_TYPES
                        and symbol["st_info"]["bind"] in _EXPORTED
                    ):
                        found.add(symbol.name)
            return found
    except OSError as exc:
        raise MallocbenchError(f"cannot read allocator library {path}: {exc.strerror}") from None
    except ELFError as exc:
        raise MallocbenchError(
            f"allocator library {path} is not an ELF shared object ({exc}): give a malloc .so"
        ) from None


def check_allocator_library(path: str) -> None:
    """Refuse `path` unless its dynamic symbol table defines malloc, free, calloc, realloc."""
    missing = [name for name in REQUIRED if name not in defined_functions(path)]
    if missing:
        raise MallocbenchError(
            f"allocator library {path} is not an allocator: it does not define "
            f"{', '.join(missing)} itself (its dynamic symbol table), so preloading it would "
            "leave the C library's malloc in charge; give an allocator's .so such as "
            "libjemalloc.so.2, or a built-in name (mallocbench allocators)"
        )
