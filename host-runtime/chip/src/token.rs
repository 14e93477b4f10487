//! The chip's token vocabulary: token *kinds*, each a tuple of small *fields*.
//!
//! A chip token's embedding row holds 1 in its kind's dimension and 1 in the dimension
//! of each of its field values (one-hot), besides the anchors. With tied embeddings
//! the same row is its lm_head row, so the final residual chooses the next token by
//! scoring kinds and field values in those same dimensions.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDef {
    pub name: String,
    /// Values 0..size.
    pub size: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindDef {
    pub name: String,
    /// Indices into [`TokenSpec::fields`], most significant first in the token id.
    pub fields: Vec<usize>,
}

/// A decoded chip token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChipToken {
    pub kind: usize,
    /// Values of the kind's fields, in the kind's order.
    pub values: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSpec {
    pub fields: Vec<FieldDef>,
    pub kinds: Vec<KindDef>,
}

impl TokenSpec {
    /// Tokens of one kind: the product of its field sizes.
    pub fn kind_size(&self, kind: usize) -> usize {
        self.kinds[kind].fields.iter().map(|f| self.fields[*f].size).product()
    }

    /// Chip tokens in all.
    pub fn vocab_size(&self) -> usize {
        (0..self.kinds.len()).map(|k| self.kind_size(k)).sum()
    }

    /// First chip-token index of a kind.
    pub fn kind_offset(&self, kind: usize) -> usize {
        (0..kind).map(|k| self.kind_size(k)).sum()
    }

    /// The chip-token index (0-based within the chip vocabulary) of a token.
    pub fn encode(&self, token: &ChipToken) -> usize {
        let kind = &self.kinds[token.kind];
        assert_eq!(
            token.values.len(),
            kind.fields.len(),
            "wrong number of fields for {}",
            kind.name
        );
        let mut index = 0;
        for (f, v) in kind.fields.iter().zip(&token.values) {
            let size = self.fields[*f].size;
            assert!(*v < size, "value {v} out of range for field {}", self.fields[*f].name);
            index = index * size + v;
        }
        self.kind_offset(token.kind) + index
    }

    /// The token at chip-token index `index`.
    pub fn decode(&self, mut index: usize) -> Option<ChipToken> {
        for (k, kind) in self.kinds.iter().enumerate() {
            let size = self.kind_size(k);
            if index < size {
                let mut values = vec![0; kind.fields.len()];
                for (slot, f) in kind.fields.iter().enumerate().rev() {
                    let s = self.fields[*f].size;
                    values[slot] = index % s;
                    index /= s;
                }
                return Some(ChipToken { kind: k, values });
            }
            index -= size;
        }
        None
    }

    /// Index of a kind by name.
    pub fn kind_index(&self, name: &str) -> Option<usize> {
        self.kinds.iter().position(|k| k.name == name)
    }

    /// Index of a field by name.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let spec = TokenSpec {
            fields: vec![
                FieldDef {
                    name: "a".into(),
                    size: 3,
                },
                FieldDef {
                    name: "b".into(),
                    size: 5,
                },
            ],
            kinds: vec![
                KindDef {
                    name: "x".into(),
                    fields: vec![0, 1],
                },
                KindDef {
                    name: "y".into(),
                    fields: vec![1],
                },
            ],
        };
        assert_eq!(spec.vocab_size(), 20);
        for i in 0..20 {
            assert_eq!(spec.encode(&spec.decode(i).unwrap()), i);
        }
        assert_eq!(spec.decode(20), None);
        assert_eq!(
            spec.decode(16),
            Some(ChipToken {
                kind: 1,
                values: vec![1]
            })
        );
    }
}
