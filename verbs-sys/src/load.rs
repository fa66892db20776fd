//! `dlopen`/`dlvsym` and the error they report.
//!
//! Hand-written rather than on `libloading`: every function is resolved at
//! the symbol version this crate's bindings were written against
//! (`dlvsym(handle, "ibv_open_device", "IBVERBS_1.1")`), so a provider
//! that exports a newer, incompatible default version is never picked up
//! by accident. `libloading` offers only `dlsym` (no versioned lookup), so
//! using it would leave this file's `dlvsym` call and its error handling in
//! place behind `Library::into_raw`, adding a dependency without removing
//! code. The unsafe surface here is three libc calls.

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::ptr::NonNull;

/// Why a library could not be loaded.
///
/// Both variants are about the machine, not the caller: the fix is to
/// install (or upgrade) rdma-core. [`fmt::Display`] says which package.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadError {
    /// `dlopen` could not open the library.
    LibraryNotFound {
        /// The name handed to `dlopen`, e.g. `libibverbs.so.1`.
        library: String,
        /// What to install, e.g. `install rdma-core (Debian: librdmacm1)`.
        install_hint: &'static str,
        /// `dlerror()`'s message.
        detail: String,
    },
    /// The library was opened but does not export a function at the version
    /// this crate resolves: it is too old, or it is not rdma-core's.
    SymbolNotFound {
        /// The name handed to `dlopen`.
        library: String,
        /// The function, e.g. `ibv_open_device`.
        symbol: &'static str,
        /// The symbol version, e.g. `IBVERBS_1.1`.
        version: &'static str,
        /// What to install.
        install_hint: &'static str,
        /// `dlerror()`'s message.
        detail: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::LibraryNotFound {
                library,
                install_hint,
                detail,
            } => write!(f, "{library} not found: {install_hint}; dlopen: {detail}"),
            LoadError::SymbolNotFound {
                library,
                symbol,
                version,
                install_hint,
                detail,
            } => write!(
                f,
                "{library} has no {symbol}@{version}: it is not rdma-core's or is too old; \
                 {install_hint}; dlvsym: {detail}"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// An open shared library. It is never closed: providers and objects created
/// through it (contexts, ops tables) must outlive every caller, so the
/// library stays mapped for the life of the process.
pub(crate) struct DynLib {
    handle: NonNull<c_void>,
    name: String,
    install_hint: &'static str,
}

impl DynLib {
    /// Opens `name` with `RTLD_NOW | RTLD_LOCAL`.
    pub(crate) fn open(name: &str, install_hint: &'static str) -> Result<Self, LoadError> {
        let not_found = |detail: String| LoadError::LibraryNotFound {
            library: name.to_owned(),
            install_hint,
            detail,
        };
        let cname = CString::new(name).map_err(|_| not_found("name contains a NUL byte".into()))?;
        // SAFETY: `cname` is a NUL-terminated string that outlives the call;
        // dlopen has no other precondition and is thread-safe.
        let handle = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        match NonNull::new(handle) {
            Some(handle) => Ok(DynLib {
                handle,
                name: name.to_owned(),
                install_hint,
            }),
            None => Err(not_found(last_dl_error())),
        }
    }

    /// The address of `symbol` at `version` (`dlvsym`), or of the default
    /// version where the C library has no `dlvsym`.
    pub(crate) fn symbol(
        &self,
        symbol: &'static str,
        version: &'static str,
    ) -> Result<NonNull<c_void>, LoadError> {
        let missing = |detail: String| LoadError::SymbolNotFound {
            library: self.name.clone(),
            symbol,
            version,
            install_hint: self.install_hint,
            detail,
        };
        let csym = CString::new(symbol).map_err(|_| missing("NUL in symbol".into()))?;
        let cver = CString::new(version).map_err(|_| missing("NUL in version".into()))?;
        let addr = dl_versioned_symbol(self.handle, &csym, &cver);
        NonNull::new(addr).ok_or_else(|| missing(last_dl_error()))
    }
}

#[cfg(target_env = "gnu")]
fn dl_versioned_symbol(handle: NonNull<c_void>, symbol: &CStr, version: &CStr) -> *mut c_void {
    // SAFETY: `handle` came from a successful dlopen and is never closed;
    // both strings are NUL-terminated and outlive the call.
    unsafe { libc::dlvsym(handle.as_ptr(), symbol.as_ptr(), version.as_ptr()) }
}

#[cfg(not(target_env = "gnu"))]
fn dl_versioned_symbol(handle: NonNull<c_void>, symbol: &CStr, _version: &CStr) -> *mut c_void {
    // SAFETY: `handle` came from a successful dlopen and is never closed;
    // `symbol` is NUL-terminated and outlives the call.
    unsafe { libc::dlsym(handle.as_ptr(), symbol.as_ptr()) }
}

/// `dlerror()` as a `String`; it is per thread, so this reads the error of
/// the dlopen/dlvsym call just made on this thread.
fn last_dl_error() -> String {
    // SAFETY: dlerror takes no arguments; glibc keeps its state per thread.
    let msg = unsafe { libc::dlerror() };
    if msg.is_null() {
        "no detail".to_owned()
    } else {
        // SAFETY: a non-null dlerror result is a NUL-terminated string that
        // stays valid until the next dl* call on this thread; it is copied
        // before that.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Declares a table of function pointers resolved from one library.
///
/// Each `required` entry is `name @ "VERSION": fn(args) -> ret;` and becomes
/// a field of type `unsafe extern "C" fn(args) -> ret`; loading fails if it is
/// missing. Each `optional` entry becomes an `Option<...>` field that is
/// `None` when the library predates it.
macro_rules! fn_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident;
        required {
            $(
                $(#[$fmeta:meta])*
                $sym:ident @ $ver:literal : fn($($arg:ident: $aty:ty),* $(,)?) $(-> $ret:ty)?;
            )*
        }
        optional {
            $(
                $(#[$ofmeta:meta])*
                $osym:ident @ $over:literal : fn($($oarg:ident: $oaty:ty),* $(,)?) $(-> $oret:ty)?;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        #[allow(non_snake_case)]
        pub struct $name {
            $(
                #[doc = concat!("`", stringify!($sym), "`, resolved as `", stringify!($sym), "@", $ver, "`.")]
                $(#[$fmeta])*
                pub $sym: unsafe extern "C" fn($($arg: $aty),*) $(-> $ret)?,
            )*
            $(
                #[doc = concat!("`", stringify!($osym), "`, resolved as `", stringify!($osym), "@", $over, "`; `None` when the library is older than that.")]
                $(#[$ofmeta])*
                pub $osym: Option<unsafe extern "C" fn($($oarg: $oaty),*) $(-> $oret)?>,
            )*
        }

        impl $name {
            /// Every function this table resolves, as `(symbol, version, required)`.
            pub const SYMBOLS: &'static [(&'static str, &'static str, bool)] = &[
                $((stringify!($sym), $ver, true),)*
                $((stringify!($osym), $over, false),)*
            ];

            fn resolve(lib: &$crate::load::DynLib) -> Result<Self, $crate::load::LoadError> {
                Ok($name {
                    $(
                        $sym: {
                            let addr = lib.symbol(stringify!($sym), $ver)?;
                            // SAFETY: `addr` is the address of the exported C
                            // function of this name and version, whose
                            // prototype in rdma-core's headers is the one
                            // written here (the signatures were taken from
                            // bindgen's output for those headers).
                            unsafe {
                                std::mem::transmute::<
                                    *mut std::ffi::c_void,
                                    unsafe extern "C" fn($($aty),*) $(-> $ret)?,
                                >(addr.as_ptr())
                            }
                        },
                    )*
                    $(
                        $osym: match lib.symbol(stringify!($osym), $over) {
                            // SAFETY: as for the required functions above.
                            Ok(addr) => Some(unsafe {
                                std::mem::transmute::<
                                    *mut std::ffi::c_void,
                                    unsafe extern "C" fn($($oaty),*) $(-> $oret)?,
                                >(addr.as_ptr())
                            }),
                            Err(_) => None,
                        },
                    )*
                })
            }
        }
    };
}

pub(crate) use fn_table;
