//! `#[blocking_twin(path::to::BlockingClient)]`: the blocking client's calls, generated from the
//! async client's (decision 0004, amended by issue 30): one definition, two shells, as psycopg 3
//! generates its sync code from its async code. Put on an `impl Client { … }` block of async
//! calls, it leaves the block as it is and adds, for every `pub async fn` taking `&self`, a
//! method of the same name, generics, arguments, documentation and result on the blocking
//! client that runs the async call to completion on the blocking client's runtime:
//!
//! ```ignore
//! pub fn name(&self, a: A, b: B) -> R { self.runtime.block_on(self.client.name(a, b)) }
//! ```
//!
//! So a call exists in both shells or in neither, with one signature: the twin cannot drift.
//! Other methods (private helpers, `&mut self`, associated functions) get no twin. The
//! blocking client must have the fields `runtime` (a tokio runtime) and `client` (the async
//! client), visible where the block is. An argument that is not a plain name (a pattern) is a
//! compile error naming it.

// Functions fit on a screen: the threshold is in clippy.toml.
#![warn(clippy::too_many_lines)]

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ImplItem, ImplItemFn, ItemImpl, Pat, Type, Visibility, parse_macro_input};

#[proc_macro_attribute]
pub fn blocking_twin(attr: TokenStream, item: TokenStream) -> TokenStream {
    let twin: Type = parse_macro_input!(attr as Type);
    let calls = parse_macro_input!(item as ItemImpl);
    let mut twins = Vec::new();
    for item in &calls.items {
        let ImplItem::Fn(method) = item else {
            continue;
        };
        if let Some(twin) = twin_of(method) {
            twins.push(twin);
        }
    }
    quote! {
        #calls

        impl #twin {
            #(#twins)*
        }
    }
    .into()
}

/// The blocking twin of a `pub async fn` taking `&self`; `None` for any other method.
fn twin_of(method: &ImplItemFn) -> Option<proc_macro2::TokenStream> {
    let signature = &method.sig;
    let public = matches!(method.vis, Visibility::Public(_));
    let by_shared_ref = matches!(
        signature.inputs.first(),
        Some(FnArg::Receiver(receiver)) if receiver.reference.is_some() && receiver.mutability.is_none()
    );
    if signature.asyncness.is_none() || !public || !by_shared_ref {
        return None;
    }
    let mut arguments = Vec::new();
    for input in signature.inputs.iter().skip(1) {
        let FnArg::Typed(typed) = input else {
            continue;
        };
        match &*typed.pat {
            Pat::Ident(ident) => arguments.push(ident.ident.clone()),
            other => {
                let message = "a call with a blocking twin takes plain named arguments";
                return Some(quote_spanned! { other.span() => compile_error!(#message); });
            }
        }
    }
    let mut blocking = signature.clone();
    blocking.asyncness = None;
    let docs = method
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("doc"));
    let name = &signature.ident;
    Some(quote! {
        #(#docs)*
        pub #blocking {
            self.runtime.block_on(self.client.#name(#(#arguments),*))
        }
    })
}
