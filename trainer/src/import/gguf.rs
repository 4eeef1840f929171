//! The GGUF container (versions 2 and 3): its metadata and its tensor directory, read
//! from bytes with every length and offset checked, so a truncated or corrupt file is an
//! error naming what is wrong, never a panic or an allocation the file did not pay for.

use std::collections::BTreeMap;

use super::quant::TensorType;
use super::ImportError;

/// The file's first four bytes.
const MAGIC: &[u8; 4] = b"GGUF";
/// The alignment of the tensor data when the metadata names none.
const DEFAULT_ALIGNMENT: u64 = 32;
/// More dimensions than any GGUF writer uses.
const MAX_DIMS: u32 = 4;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any of the integer types, widened.
    Int(i64),
    /// An unsigned 64-bit integer too large for `Int`.
    Uint(u64),
    /// `f32` or `f64`.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A UTF-8 string.
    Text(String),
    /// An array of values of one type.
    Array(Vec<Value>),
}

impl Value {
    /// The value as a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::Uint(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(v) => Some(v as f64),
            Value::Uint(v) => Some(v as f64),
            Value::Float(v) => Some(v),
            _ => None,
        }
    }

    /// The value as text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(values) => Some(values),
            _ => None,
        }
    }
}

/// One tensor of the directory.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Its name (`blk.0.attn_q.weight`, ...).
    pub name: String,
    /// GGUF's dimensions, fastest-varying first (a PyTorch `[out, in]` weight is
    /// `[in, out]` here).
    pub dims: Vec<u64>,
    /// How its elements are stored.
    pub kind: TensorType,
    /// Where its bytes start in the file.
    pub start: usize,
    /// How many bytes it takes.
    pub bytes: usize,
}

impl TensorInfo {
    /// Its elements.
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Its shape in PyTorch's order (slowest-varying first).
    pub fn torch_shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// A parsed GGUF file: metadata by key, and the tensor directory in file order.
#[derive(Clone, Debug)]
pub struct GgufFile {
    /// The container version (2 or 3).
    pub version: u32,
    /// Every metadata entry.
    pub metadata: BTreeMap<String, Value>,
    /// Every tensor, with its byte range checked against the file's length.
    pub tensors: Vec<TensorInfo>,
}

impl GgufFile {
    /// Parses the header, metadata and tensor directory of `bytes`, a whole GGUF file.
    pub fn parse(bytes: &[u8]) -> Result<GgufFile, ImportError> {
        let mut reader = Reader { bytes, at: 0 };
        if reader.take(4, "the magic number")? != MAGIC {
            return Err(ImportError::Format(
                "not a GGUF file (it does not start with \"GGUF\")".into(),
            ));
        }
        let version = reader.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(ImportError::Format(format!(
                "GGUF version {version} is not supported (2 and 3 are)"
            )));
        }
        let tensor_count = reader.u64("the tensor count")?;
        let metadata_count = reader.u64("the metadata count")?;
        let mut metadata = BTreeMap::new();
        for index in 0..metadata_count {
            let key = reader.string(&format!("metadata key {index}"))?;
            let kind = reader.u32(&format!("the type of {key}"))?;
            let value = reader.value(kind, &key, 0)?;
            metadata.insert(key, value);
        }
        let mut directory = Vec::new();
        for index in 0..tensor_count {
            let name = reader.string(&format!("tensor name {index}"))?;
            let n_dims = reader.u32(&format!("the dimension count of {name}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(ImportError::Tensor {
                    name,
                    problem: format!("{n_dims} dimensions (1 to {MAX_DIMS} are supported)"),
                });
            }
            let dims = (0..n_dims)
                .map(|_| reader.u64(&format!("the dimensions of {name}")))
                .collect::<Result<Vec<_>, _>>()?;
            let kind = reader.u32(&format!("the type of {name}"))?;
            let offset = reader.u64(&format!("the offset of {name}"))?;
            directory.push((name, dims, kind, offset));
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(value) => value
                .as_u64()
                .filter(|a| a.is_power_of_two())
                .ok_or_else(|| {
                    ImportError::Format(format!(
                        "general.alignment is {value:?}, not a power of two"
                    ))
                })?,
        };
        let data_start = (reader.at as u64).div_ceil(alignment) * alignment;
        let mut tensors = Vec::with_capacity(directory.len());
        for (name, dims, kind, offset) in directory {
            let kind = TensorType::from_id(kind).ok_or_else(|| ImportError::Tensor {
                name: name.clone(),
                problem: format!(
                    "GGML type {kind} is not supported ({})",
                    TensorType::SUPPORTED
                ),
            })?;
            let bad = |problem: String| ImportError::Tensor {
                name: name.clone(),
                problem,
            };
            let elements = dims
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(format!("dimensions {dims:?} are empty or too large")))?;
            let bytes_needed = kind.bytes_for(elements, dims[0]).map_err(|problem| {
                bad(format!("{} of dimensions {dims:?}: {problem}", kind.name()))
            })?;
            let start = data_start
                .checked_add(offset)
                .filter(|_| offset % alignment == 0)
                .ok_or_else(|| bad(format!("offset {offset} is not aligned to {alignment}")))?;
            let end = start.checked_add(bytes_needed);
            if end.is_none_or(|end| end > bytes.len() as u64) {
                return Err(bad(format!(
                    "its {bytes_needed} bytes at {start} run past the end of the file ({} bytes): \
                     the file is truncated",
                    bytes.len()
                )));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                kind,
                start: start as usize,
                bytes: bytes_needed as usize,
            });
        }
        Ok(GgufFile {
            version,
            metadata,
            tensors,
        })
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Reads little-endian values from a byte slice, naming what it read on failure.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Nested arrays deeper than this are refused (GGUF writers use one level).
const MAX_ARRAY_DEPTH: u32 = 2;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], ImportError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| {
                ImportError::Format(format!(
                    "the file ends inside {what} (at byte {} of {})",
                    self.at,
                    self.bytes.len()
                ))
            })?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], ImportError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, ImportError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, ImportError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `item_bytes` each, which the rest of the file must be
    /// able to hold (so a corrupt count never becomes a huge allocation).
    fn count(&mut self, item_bytes: usize, what: &str) -> Result<usize, ImportError> {
        let count = self.u64(what)?;
        let left = (self.bytes.len() - self.at) as u64;
        if count.saturating_mul(item_bytes.max(1) as u64) > left {
            return Err(ImportError::Format(format!(
                "{what} is {count}, more than the {left} bytes left in the file can hold: the \
                 file is truncated or corrupt"
            )));
        }
        Ok(count as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, ImportError> {
        let len = self.count(1, &format!("the length of {what}"))?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| ImportError::Format(format!("{what} is not UTF-8")))
    }

    /// A metadata value of GGUF type `kind` (of key `key`).
    fn value(&mut self, kind: u32, key: &str, depth: u32) -> Result<Value, ImportError> {
        Ok(match kind {
            0 => Value::Int(i64::from(self.array::<1>(key)?[0])),
            1 => Value::Int(i64::from(i8::from_le_bytes(self.array(key)?))),
            2 => Value::Int(i64::from(u16::from_le_bytes(self.array(key)?))),
            3 => Value::Int(i64::from(i16::from_le_bytes(self.array(key)?))),
            4 => Value::Int(i64::from(self.u32(key)?)),
            5 => Value::Int(i64::from(i32::from_le_bytes(self.array(key)?))),
            6 => Value::Float(f64::from(f32::from_le_bytes(self.array(key)?))),
            7 => Value::Bool(self.array::<1>(key)?[0] != 0),
            8 => Value::Text(self.string(key)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(ImportError::Format(format!(
                        "{key}: arrays nested deeper than {MAX_ARRAY_DEPTH}"
                    )));
                }
                let item = self.u32(key)?;
                let count = self.count(1, &format!("the length of {key}"))?;
                let values = (0..count)
                    .map(|_| self.value(item, key, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Value::Array(values)
            }
            10 => {
                let v = self.u64(key)?;
                i64::try_from(v).map_or(Value::Uint(v), Value::Int)
            }
            11 => Value::Int(i64::from_le_bytes(self.array(key)?)),
            12 => Value::Float(f64::from_le_bytes(self.array(key)?)),
            other => {
                return Err(ImportError::Format(format!(
                    "{key}: unknown metadata type {other}"
                )))
            }
        })
    }
}
