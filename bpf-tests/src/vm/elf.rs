//! A minimal reader for 64-bit little-endian ELF files: just enough to read a kernel
//! module's `.modinfo` section and the notes of an uncompressed `vmlinux`.
//!
//! Every offset comes from the file, so every access is bounds-checked.

/// Why a file could not be read as ELF.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file does not start with the ELF magic.
    #[error("not an ELF file (bad magic)")]
    BadMagic,
    /// The file is ELF but not 64-bit little-endian.
    #[error("not a 64-bit little-endian ELF file")]
    WrongClass,
    /// A header points outside the file.
    #[error("truncated ELF file: {what} at offset {offset} is outside the file")]
    Truncated {
        /// Which structure was being read.
        what: &'static str,
        /// The offset that was out of range.
        offset: u64,
    },
}

/// ELF machine number of x86-64.
pub const EM_X86_64: u16 = 62;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;

/// A parsed view over the bytes of an ELF file.
#[derive(Debug, Clone, Copy)]
pub struct Elf<'a> {
    data: &'a [u8],
    machine: u16,
    phoff: u64,
    phentsize: u64,
    phnum: u64,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
}

/// One ELF note: owner name, type and descriptor bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Note<'a> {
    /// Owner name without the trailing NUL (`"Xen"`, `"GNU"`, `"Linux"`).
    pub name: &'a [u8],
    /// Note type, meaning defined by the owner.
    pub kind: u32,
    /// Descriptor bytes.
    pub desc: &'a [u8],
}

fn slice<'a>(
    data: &'a [u8],
    offset: u64,
    len: u64,
    what: &'static str,
) -> Result<&'a [u8], ElfError> {
    let start = usize::try_from(offset).map_err(|_| ElfError::Truncated { what, offset })?;
    let len = usize::try_from(len).map_err(|_| ElfError::Truncated { what, offset })?;
    start
        .checked_add(len)
        .and_then(|end| data.get(start..end))
        .ok_or(ElfError::Truncated { what, offset })
}

fn u16_at(data: &[u8], offset: u64, what: &'static str) -> Result<u16, ElfError> {
    let b = slice(data, offset, 2, what)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(data: &[u8], offset: u64, what: &'static str) -> Result<u32, ElfError> {
    let b = slice(data, offset, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(data: &[u8], offset: u64, what: &'static str) -> Result<u64, ElfError> {
    let b = slice(data, offset, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

fn align4(n: u64) -> u64 {
    n.div_ceil(4) * 4
}

impl<'a> Elf<'a> {
    /// Parses the ELF header of `data`.
    pub fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
        if data.get(0..4) != Some(b"\x7fELF".as_slice()) {
            return Err(ElfError::BadMagic);
        }
        if data.get(4) != Some(&2) || data.get(5) != Some(&1) {
            return Err(ElfError::WrongClass);
        }
        Ok(Self {
            data,
            machine: u16_at(data, 18, "e_machine")?,
            phoff: u64_at(data, 32, "e_phoff")?,
            shoff: u64_at(data, 40, "e_shoff")?,
            phentsize: u64::from(u16_at(data, 54, "e_phentsize")?),
            phnum: u64::from(u16_at(data, 56, "e_phnum")?),
            shentsize: u64::from(u16_at(data, 58, "e_shentsize")?),
            shnum: u64::from(u16_at(data, 60, "e_shnum")?),
            shstrndx: u64::from(u16_at(data, 62, "e_shstrndx")?),
        })
    }

    /// The `e_machine` field (see [`EM_X86_64`]).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// The contents of the section called `name`, if there is one.
    pub fn section(&self, name: &str) -> Result<Option<&'a [u8]>, ElfError> {
        if self.shnum == 0 {
            return Ok(None);
        }
        let strtab_hdr = self.shoff + self.shstrndx * self.shentsize;
        let strtab = slice(
            self.data,
            u64_at(self.data, strtab_hdr + 24, "section name table offset")?,
            u64_at(self.data, strtab_hdr + 32, "section name table size")?,
            "section name table",
        )?;
        for i in 0..self.shnum {
            let hdr = self.shoff + i * self.shentsize;
            let name_off = u32_at(self.data, hdr, "sh_name")? as usize;
            let Some(rest) = strtab.get(name_off..) else {
                continue;
            };
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            if &rest[..end] == name.as_bytes() {
                let off = u64_at(self.data, hdr + 24, "sh_offset")?;
                let size = u64_at(self.data, hdr + 32, "sh_size")?;
                return slice(self.data, off, size, "section contents").map(Some);
            }
        }
        Ok(None)
    }

    /// Whether the file asks for a dynamic loader (`PT_INTERP`), i.e. is not static.
    pub fn has_interpreter(&self) -> Result<bool, ElfError> {
        for i in 0..self.phnum {
            if u32_at(self.data, self.phoff + i * self.phentsize, "p_type")? == PT_INTERP {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// All notes in `PT_NOTE` segments.
    pub fn notes(&self) -> Result<Vec<Note<'a>>, ElfError> {
        let mut notes = Vec::new();
        for i in 0..self.phnum {
            let hdr = self.phoff + i * self.phentsize;
            if u32_at(self.data, hdr, "p_type")? != PT_NOTE {
                continue;
            }
            let seg = slice(
                self.data,
                u64_at(self.data, hdr + 8, "p_offset")?,
                u64_at(self.data, hdr + 32, "p_filesz")?,
                "note segment",
            )?;
            let mut pos = 0u64;
            while pos + 12 <= seg.len() as u64 {
                let namesz = u64::from(u32_at(seg, pos, "note namesz")?);
                let descsz = u64::from(u32_at(seg, pos + 4, "note descsz")?);
                let kind = u32_at(seg, pos + 8, "note type")?;
                let name = slice(seg, pos + 12, namesz, "note name")?;
                let name = name.strip_suffix(&[0]).unwrap_or(name);
                let desc_off = pos + 12 + align4(namesz);
                let desc = slice(seg, desc_off, descsz, "note desc")?;
                notes.push(Note { name, kind, desc });
                pos = desc_off + align4(descsz);
            }
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_elf_and_32_bit() {
        assert!(matches!(Elf::parse(b"MZ\x90\x00"), Err(ElfError::BadMagic)));
        assert!(matches!(
            Elf::parse(b"\x7fELF\x01\x01"),
            Err(ElfError::WrongClass)
        ));
    }

    #[test]
    fn truncated_header_is_an_error_not_a_panic() {
        let r = Elf::parse(b"\x7fELF\x02\x01\x01\x00");
        assert!(matches!(r, Err(ElfError::Truncated { .. })), "{r:?}");
    }

    #[test]
    fn reads_sections_and_notes_of_a_real_binary() {
        // This test executable is itself a 64-bit ELF with a GNU build-id note.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let elf = Elf::parse(&exe).unwrap();
        assert!(elf.section(".text").unwrap().is_some_and(|t| !t.is_empty()));
        assert!(elf.section(".no-such-section").unwrap().is_none());
        let notes = elf.notes().unwrap();
        assert!(notes.iter().any(|n| n.name == b"GNU"), "{notes:?}");
        assert!(
            elf.has_interpreter().unwrap(),
            "test binaries are dynamically linked"
        );
    }
}
