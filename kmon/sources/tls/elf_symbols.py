"""Where named functions sit in an ELF file: the file offset a uprobe takes, from the file's
``.dynsym`` and ``.symtab`` (a statically linked OpenSSL, as in the confluent-kafka wheels'
librdkafka, is only in ``.symtab``); and where named data objects sit in memory (a Go
program's interface tables, in ``.symtab``).

The file is the watched process's: hostile. Every read is bounded (the section table, each
symbol table and its strings), a table that points outside the file is skipped, and a
64-bit little-endian ELF is all that is read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Collection

MAX_SECTIONS = 4096
MAX_TABLE_BYTES = 64 << 20  # one symbol table, or its strings, read at most
CHUNK = 1 << 20
ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION = struct.Struct("<IIQQQQIIQQ")
SEGMENT = struct.Struct("<IIQQQQQQ")
SYMBOL = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM, PT_LOAD, STT_OBJECT, STT_FUNC, SHN_UNDEF = 2, 11, 1, 1, 2, 0


class NotElf(Exception):
    """The file is not an ELF kmon reads (not 64-bit little-endian, or cut short)."""


def function_offsets(path: str, names: Collection[str]) -> dict[str, int]:
    """The file offset of each of ``names`` that the file defines as a function."""
    found, loads = _defined(path, names, STT_FUNC)
    return {name: offset for name, address in found.items()
            if (offset := _file_offset(address, loads)) is not None}


def object_addresses(path: str, names: Collection[str]) -> tuple[dict[str, int], int]:
    """The virtual address of each of ``names`` that the file defines as a data object, and
    the lowest address it loads at (what a mapping of its offset 0 starts at, once
    relocated): an object's place in a process is its address plus that mapping's start
    less this."""
    found, loads = _defined(path, names, STT_OBJECT)
    lowest = min((vaddr - offset for _t, _f, offset, vaddr, *_ in loads), default=0)
    return found, lowest


def _defined(path: str, names: Collection[str], kind: int) -> tuple[dict[str, int], list]:
    """The address of each of ``names`` the file defines as a symbol of ``kind``, and its
    loadable segments."""
    wanted = {name.encode() for name in names}
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        header = _read(fd, 0, ELF_HEADER.size)
        (ident, _type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize,
         phnum, shentsize, shnum, _shstrndx) = ELF_HEADER.unpack(header)
        if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
            raise NotElf(path)
        if shentsize != SECTION.size or phentsize != SEGMENT.size or shnum > MAX_SECTIONS:
            raise NotElf(path)
        sections = [SECTION.unpack_from(_read(fd, shoff, shnum * SECTION.size), i * SECTION.size)
                    for i in range(shnum)]
        loads = [s for s in (SEGMENT.unpack_from(_read(fd, phoff, phnum * SEGMENT.size),
                                                 i * SEGMENT.size) for i in range(phnum))
                 if s[0] == PT_LOAD]
        found: dict[bytes, int] = {}
        for table in (SHT_DYNSYM, SHT_SYMTAB):
            for section in sections:
                if section[1] == table and section[6] < len(sections):
                    _symbols(fd, size, section, sections[section[6]], wanted, kind, found)
        return {name.decode(): address for name, address in found.items()}, loads


def _symbols(fd: int, size: int, table: tuple, strings: tuple, wanted: set[bytes], kind: int,
             found: dict[bytes, int]) -> None:
    """The defined symbols of ``kind`` among ``wanted`` in one symbol table, into ``found``."""
    offset, length = table[4], table[5]
    str_offset, str_length = strings[4], strings[5]
    if not (_inside(offset, length, size) and _inside(str_offset, str_length, size)):
        return
    names = _read(fd, str_offset, str_length)
    longest = max(map(len, wanted)) + 1
    for at in range(offset, offset + length - length % SYMBOL.size, CHUNK):
        chunk = _read(fd, at, min(CHUNK, offset + length - at) // SYMBOL.size * SYMBOL.size)
        for name_at, info, _other, shndx, value, _size in SYMBOL.iter_unpack(chunk):
            if info & 0xF != kind or shndx == SHN_UNDEF or value == 0:
                continue
            name = names[name_at:name_at + longest].split(b"\0", 1)[0]
            if name in wanted:
                found.setdefault(name, value)


def _file_offset(address: int, loads: list[tuple]) -> int | None:
    """The file offset of a virtual address, by the loadable segment that holds it."""
    for _type, _flags, offset, vaddr, _paddr, filesz, _memsz, _align in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    return None


def _inside(offset: int, length: int, size: int) -> bool:
    return offset >= 0 and 0 < length <= MAX_TABLE_BYTES and offset + length <= size


def _read(fd: int, offset: int, length: int) -> bytes:
    if length > MAX_TABLE_BYTES:
        raise NotElf("a table larger than kmon reads")
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise NotElf("cut short")
    return data
