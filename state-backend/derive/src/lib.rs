//! `#[derive(TypeSignature)]`: the structural signature of a struct or enum, for `weir_state::signature`.
//!
//! The generated `shape()` names the type by its identifier (not its module path, which refactors move) and
//! lists its fields in order with their names and types' shapes (tuple fields are named `0`, `1`, …), or its
//! variants with their names and payloads. Generic parameters get a `TypeSignature` bound, so `Wrapper<u32>`
//! and `Wrapper<String>` differ. A field may opt out of the structure with `#[signature(skip)]` (for fields
//! that are not serialized, such as `#[serde(skip)]` ones).

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, GenericParam};

/// Derives `weir_state::signature::TypeSignature` for a struct or enum.
#[proc_macro_derive(TypeSignature, attributes(signature))]
pub fn derive_type_signature(input: TokenStream) -> TokenStream {
    let mut input = parse_macro_input!(input as DeriveInput);
    for param in &mut input.generics.params {
        if let GenericParam::Type(t) = param {
            t.bounds.push(parse_quote!(::weir_state::signature::TypeSignature));
        }
    }
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let name_str = name.to_string();
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let body = match &input.data {
        Data::Struct(s) => {
            let fields = fields_shape(&s.fields)?;
            quote! { ::weir_state::signature::Shape::Struct { name: #name_str.to_string(), fields: #fields } }
        }
        Data::Enum(e) => {
            let variants = e
                .variants
                .iter()
                .map(|v| {
                    let vname = v.ident.to_string();
                    let fields = fields_shape(&v.fields)?;
                    Ok(quote! { (#vname.to_string(), #fields) })
                })
                .collect::<syn::Result<Vec<_>>>()?;
            quote! { ::weir_state::signature::Shape::Enum { name: #name_str.to_string(), variants: vec![#(#variants),*] } }
        }
        Data::Union(u) => {
            return Err(syn::Error::new_spanned(u.union_token, "TypeSignature cannot be derived for a union"))
        }
    };
    Ok(quote! {
        impl #impl_generics ::weir_state::signature::TypeSignature for #name #ty_generics #where_clause {
            fn shape() -> ::weir_state::signature::Shape {
                ::weir_state::signature::enter::<Self>(#name_str, || #body)
            }
        }
    })
}

/// `Vec<(String, Shape)>` of the fields (not skipped), named or numbered.
fn fields_shape(fields: &Fields) -> syn::Result<TokenStream2> {
    let mut entries = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        if skipped(f)? {
            continue;
        }
        let fname = f.ident.as_ref().map(|id| id.to_string()).unwrap_or_else(|| i.to_string());
        let ty = &f.ty;
        entries.push(quote! { (#fname.to_string(), <#ty as ::weir_state::signature::TypeSignature>::shape()) });
    }
    Ok(quote! { vec![#(#entries),*] })
}

/// Whether a field carries `#[signature(skip)]` (any other `signature` argument is an error).
fn skipped(field: &syn::Field) -> syn::Result<bool> {
    let mut skip = false;
    for a in field.attrs.iter().filter(|a| a.path().is_ident("signature")) {
        a.parse_nested_meta(|m| {
            if m.path.is_ident("skip") {
                skip = true;
                Ok(())
            } else {
                Err(m.error("unknown signature attribute; expected `skip`"))
            }
        })?;
    }
    Ok(skip)
}
