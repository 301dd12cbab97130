"""Where named functions sit in an ELF file: the file offset a uprobe takes, from the file's
``.dynsym`` and ``.symtab`` (a statically linked OpenSSL, as in the confluent-kafka wheels'
librdkafka, is only in ``.symtab``).

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
SHT_SYMTAB, SHT_DYNSYM, PT_LOAD, STT_FUNC, SHN_UNDEF = 2, 11, 1, 2, 0


class NotElf(Exception):
    """The file is not an ELF kmon reads (not 64-bit little-endian, or cut short)."""


def function_offsets(path: str, names: Collection[str]) -> dict[str, int]:
    """The file offset of each of ``names`` that the file defines as a function."""
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
        for kind in (SHT_DYNSYM, SHT_SYMTAB):
            for section in sections:
                if section[1] == kind and section[6] < len(sections):
                    _symbols(fd, size, section, sections[section[6]], wanted, found)
        return {name.decode(): offset for name, address in found.items()
                if (offset := _file_offset(address, loads)) is not None}


def _symbols(fd: int, size: int, table: tuple, strings: tuple, wanted: set[bytes],
             found: dict[bytes, int]) -> None:
    """The defined functions among ``wanted`` in one symbol table, into ``found``."""
    offset, length = table[4], table[5]
    str_offset, str_length = strings[4], strings[5]
    if not (_inside(offset, length, size) and _inside(str_offset, str_length, size)):
        return
    names = _read(fd, str_offset, str_length)
    longest = max(map(len, wanted)) + 1
    for at in range(offset, offset + length - length % SYMBOL.size, CHUNK):
        chunk = _read(fd, at, min(CHUNK, offset + length - at) // SYMBOL.size * SYMBOL.size)
        for name_at, info, _other, shndx, value, _size in SYMBOL.iter_unpack(chunk):
            if info & 0xF != STT_FUNC or shndx == SHN_UNDEF or value == 0:
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
