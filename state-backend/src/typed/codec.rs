//! How typed state values become bytes. Fixed-width integers are big-endian so that their byte order is
//! their numeric order.

use crate::error::StateError;

/// A type that can be stored in state.
pub trait StateCodec: Sized {
    /// Appends the value's bytes to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads a value from its bytes.
    fn decode(bytes: &[u8]) -> Result<Self, StateError>;
}

macro_rules! int_codec {
    ($($t:ty),*) => {$(
        impl StateCodec for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn decode(bytes: &[u8]) -> Result<Self, StateError> {
                let arr = bytes.try_into().map_err(|_| {
                    StateError::Corrupt(format!("expected {} bytes for {}, found {}", std::mem::size_of::<$t>(), stringify!($t), bytes.len()))
                })?;
                Ok(<$t>::from_be_bytes(arr))
            }
        }
    )*};
}

int_codec!(u32, u64, i32, i64);

/// Decodes a stored value of state `state` as `T`; a value that does not decode is reported with the state's
/// name, the type and what to do, not as a bare decoding error.
pub(crate) fn decode_state<T: StateCodec>(state: &str, bytes: &[u8]) -> Result<T, StateError> {
    T::decode(bytes).map_err(|e| StateError::Decode {
        state: state.to_string(),
        type_name: std::any::type_name::<T>(),
        detail: e.to_string(),
    })
}

impl StateCodec for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        Ok(bytes.to_vec())
    }
}

impl StateCodec for String {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        String::from_utf8(bytes.to_vec()).map_err(|e| StateError::Corrupt(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut b = Vec::new();
        42u64.encode(&mut b);
        assert_eq!(u64::decode(&b).unwrap(), 42);
        assert!(u64::decode(&b[..3]).is_err());
        let mut s = Vec::new();
        "hé".to_string().encode(&mut s);
        assert_eq!(String::decode(&s).unwrap(), "hé");
    }
}
