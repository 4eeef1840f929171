//! One safetensors file: parsing it (every malformation becomes a [`WeightsError`]
//! naming the file), decoding its tensors to `f32`, and writing tensors in a chosen
//! [`Dtype`] with the `{"format": "pt"}` metadata transformers expects.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use safetensors::tensor::TensorView;
use safetensors::{SafeTensors, View};

use super::dtype::Dtype;
use super::error::WeightsError;

/// A tensor on the host in `f32`: its shape and its row-major elements.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// `shape.iter().product()` elements, row-major.
    pub data: Vec<f32>,
}

/// Reads every tensor of the safetensors file at `path`, converted to `f32`.
pub fn read_safetensors(path: &Path) -> Result<BTreeMap<String, HostTensor>, WeightsError> {
    let bytes = read_file(path)?;
    let file = parse(&bytes, path)?;
    file.iter()
        .map(|(name, view)| {
            let tensor = HostTensor {
                shape: view.shape().to_vec(),
                data: decode(&view, name, path)?,
            };
            Ok((name.to_string(), tensor))
        })
        .collect()
}

/// Writes `tensors` to a safetensors file at `path`, stored as `dtype`.
pub fn write_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, HostTensor>,
    dtype: Dtype,
) -> Result<(), WeightsError> {
    let encoded = tensors
        .iter()
        .map(|(name, tensor)| {
            if tensor.shape.iter().product::<usize>() != tensor.data.len() {
                return Err(WeightsError::Shape {
                    tensor: name.clone(),
                    file: path.to_path_buf(),
                    expected: tensor.shape.clone(),
                    found: vec![tensor.data.len()],
                });
            }
            Ok((
                name.clone(),
                EncodedTensor::new(dtype, tensor.shape.clone(), &tensor.data),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    write_encoded(path, encoded)
}

/// The whole file at `path`.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, WeightsError> {
    std::fs::read(path).map_err(|e| WeightsError::io(path, e))
}

/// Parses the safetensors header of `bytes` (the contents of `path`) and checks that
/// every tensor's byte range lies inside the file.
pub(crate) fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<SafeTensors<'a>, WeightsError> {
    SafeTensors::deserialize(bytes).map_err(|e| WeightsError::format(path, e))
}

/// The elements of `view` (tensor `name` of `path`) as `f32`.
pub(crate) fn decode(
    view: &TensorView<'_>,
    name: &str,
    path: &Path,
) -> Result<Vec<f32>, WeightsError> {
    let dtype = Dtype::from_safetensors(view.dtype()).ok_or_else(|| WeightsError::Dtype {
        tensor: name.to_string(),
        file: path.to_path_buf(),
        dtype: format!("{:?}", view.dtype()),
    })?;
    Ok(dtype.decode(view.data()))
}

/// A tensor already encoded in its on-disk dtype, ready for serialization.
pub(crate) struct EncodedTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl EncodedTensor {
    /// Encodes `values` (shaped `shape`) as `dtype`.
    pub(crate) fn new(dtype: Dtype, shape: Vec<usize>, values: &[f32]) -> EncodedTensor {
        EncodedTensor {
            dtype,
            shape,
            bytes: dtype.encode(values),
        }
    }

    /// Bytes of the encoded data.
    pub(crate) fn byte_len(&self) -> usize {
        self.bytes.len()
    }
}

impl View for EncodedTensor {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype.to_safetensors()
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }

    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Writes named encoded tensors to `path` (through a temporary file renamed into
/// place, so a reader never sees half a file).
pub(crate) fn write_encoded(
    path: &Path,
    tensors: Vec<(String, EncodedTensor)>,
) -> Result<(), WeightsError> {
    let metadata = HashMap::from([(String::from("format"), String::from("pt"))]);
    safetensors::serialize_to_file(tensors, Some(metadata), path).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(source) => WeightsError::io(path, source),
        other => WeightsError::format(path, other),
    })
}
