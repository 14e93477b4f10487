//! The RV32IM chip's side of the interface: its token format ([`tokens`]), where its
//! architectural state lives ([`Rv32Map`], carried in the pack manifest) and the host
//! protocol that boots programs, feeds tokens back and reads state out ([`machine`]),
//! many programs at once ([`batch`]), the passes each instruction class took ([`classes`]),
//! a running machine saved and continued later ([`saved`]).

pub mod batch;
pub mod classes;
pub mod load;
pub mod machine;
pub mod saved;
pub mod tokens;

use serde::{Deserialize, Serialize};

/// The ROM row the millicode starts in: the first row of the ROM's last head (an `xm`
/// token's row is this plus its `rlo` digit).
pub const MILLICODE_FIRST_ROW: usize = 15 * 128;

/// Entries of a register's `low` memory row: nibbles 0..2 only, so that a `u` token can
/// replace them and leave the rest of the register as it was.
pub mod low {
    /// Nibble j (0..2) value v at entry 16j + v.
    pub const NIBBLES: usize = 0;
    /// Entries every write sets to 1 (pads).
    pub const PADS: std::ops::Range<usize> = 48..53;
}

/// Entries of a register's `cls` memory row: how nibbles 3..7 read (the sign fill of a
/// short value, the fill an `m` gave, an `h`'s nibbles, a link's nibbles 3 and 4).
pub mod cls {
    pub const SPOS: usize = 0;
    pub const SNEG: usize = 1;
    pub const LZERO: usize = 2;
    pub const LONES: usize = 3;
    pub const LH: usize = 4;
    pub const LINK: usize = 5;
    /// Link nibble 3 value v at entry 6 + v.
    pub const LINK_N3: usize = 6;
    /// Set by every write but a link's (`s` and `l` tokens).
    pub const NOT_LINK: usize = 22;
    /// Entries every write sets to 1 (pads).
    pub const PADS: std::ops::Range<usize> = 23..29;
}

/// Where the RV32IM chip keeps what a host reads back, and how it is coded: memory
/// indices point into the manifest's `memories`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rv32Map {
    /// The register file (the rs1 port's memories; every port holds the same rows):
    /// nibbles 0..2 ([`low`]), how nibbles 3..7 read ([`cls`]), nibbles 3..4, nibbles 5..7.
    pub regs_low: usize,
    pub regs_cls: usize,
    pub regs_up34: usize,
    pub regs_up567: usize,
    /// RAM banks in bank order.
    pub ram_banks: Vec<usize>,
    /// ROM rows the millicode occupies from [`MILLICODE_FIRST_ROW`] (booted when a
    /// program divides).
    pub millicode_rows: usize,
    /// A one-hot memory entry reads +bit_on when set and −bit_on when clear.
    pub bit_on: f32,
    /// A level-coded entry (a RAM nibble) holds level × level_unit.
    pub level_unit: f32,
}
