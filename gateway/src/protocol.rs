//! What the gateway's input-protocol layers (args.rs, limits.rs) share.

/// Implements `TInputProtocol` methods that a wrapping layer passes straight to `self.inner`,
/// so each layer spells out only the methods it changes.
macro_rules! forward_reads {
    ($($method:ident -> $value:ty),* $(,)?) => {
        $(
            fn $method(&mut self) -> thrift::Result<$value> {
                self.inner.$method()
            }
        )*
    };
}

pub(crate) use forward_reads;
