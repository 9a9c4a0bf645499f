//! The protobuf codec of Fairway's services: prost's, except that a request
//! whose bytes do not decode gets `INVALID_ARGUMENT` (the caller sent it)
//! rather than `INTERNAL` (which says the server is at fault).

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstEncoder};

use super::status;

/// [`ProstCodec`] with undecodable messages refused as invalid input.
#[derive(Debug, Clone)]
pub struct StrictCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec { _messages: PhantomData }
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder { _message: PhantomData }
    }
}

/// Decodes `U`; bytes that are not one are `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct StrictDecoder<U> {
    _message: PhantomData<U>,
}

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|error| {
            let message = std::any::type_name::<U>().rsplit("::").next().unwrap_or("message");
            status::undecodable(message, error)
        })
    }
}
