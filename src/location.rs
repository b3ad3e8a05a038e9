//! Where a zone comes from: a name, the function, file and line, and its verbosity level.
//!
//! Static locations are made at compile time by [`location!`](macro@crate::location) and cost one
//! pointer per zone. Dynamic locations ([`DynamicLocation`]) carry run-time strings behind an
//! `Arc`: cloning one on the recording path is an atomic increment. A dynamic location keeps
//! the file and line it was made at (`#[track_caller]`; [`dynamic_location!`](macro@crate::dynamic_location)
//! also keeps the function), and may carry a few key/value arguments
//! ([`DynamicLocation::arg`]), which the Chrome sink writes into the zone's `args` and the
//! Tracy sink into the zone's name.

use std::borrow::Cow;
use std::sync::Arc;

/// How much a context records. A zone is recorded when its level is at or below the
/// context's level, and the context's level is not `Off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Verbosity {
    /// Record nothing.
    Off = 0,
    /// Command-buffer-level zones only.
    Coarse = 1,
    /// Everything, down to single dispatches.
    #[default]
    Fine = 2,
}

impl Verbosity {
    /// Whether a zone of level `zone` is recorded by a context at level `self`.
    #[inline]
    pub fn records(self, zone: Verbosity) -> bool {
        self != Verbosity::Off && zone <= self
    }
}

impl std::str::FromStr for Verbosity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(Self::Off),
            "coarse" => Ok(Self::Coarse),
            "fine" => Ok(Self::Fine),
            other => Err(format!("unknown verbosity {other:?}: expected off, coarse or fine")),
        }
    }
}

/// A zone location fixed at compile time. Make one with [`location!`](macro@crate::location).
#[derive(Debug)]
pub struct SourceLocation {
    /// The zone's name.
    pub name: &'static str,
    /// Returns the enclosing function's path (computed on demand: `type_name` is not const).
    pub function: fn() -> &'static str,
    /// The source file.
    pub file: &'static str,
    /// The source line.
    pub line: u32,
    /// The zone's verbosity level.
    pub level: Verbosity,
}

/// The value of a zone argument ([`DynamicLocation::arg`]): Chrome writes numbers and
/// booleans as JSON numbers and booleans, text as strings.
#[derive(Debug, Clone)]
pub enum ArgValue {
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A floating-point number (equal when their bits are).
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// Text.
    Str(Cow<'static, str>),
}

impl PartialEq for ArgValue {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Int(a), Self::Int(b)) => a == b,
            (Self::Uint(a), Self::Uint(b)) => a == b,
            (Self::Float(a), Self::Float(b)) => a.to_bits() == b.to_bits(),
            (Self::Bool(a), Self::Bool(b)) => a == b,
            (Self::Str(a), Self::Str(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for ArgValue {}

impl std::fmt::Display for ArgValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Int(v) => write!(f, "{v}"),
            Self::Uint(v) => write!(f, "{v}"),
            Self::Float(v) => write!(f, "{v}"),
            Self::Bool(v) => write!(f, "{v}"),
            Self::Str(v) => f.write_str(v),
        }
    }
}

impl serde::Serialize for ArgValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Int(v) => s.serialize_i64(*v),
            Self::Uint(v) => s.serialize_u64(*v),
            Self::Float(v) => s.serialize_f64(*v),
            Self::Bool(v) => s.serialize_bool(*v),
            Self::Str(v) => s.serialize_str(v),
        }
    }
}

macro_rules! arg_value_from {
    ($($t:ty => $variant:ident as $as:ty),* $(,)?) => {$(
        impl From<$t> for ArgValue {
            fn from(v: $t) -> Self {
                Self::$variant(<$as>::from(v))
            }
        }
    )*};
}

arg_value_from!(
    i8 => Int as i64, i16 => Int as i64, i32 => Int as i64, i64 => Int as i64,
    u8 => Uint as u64, u16 => Uint as u64, u32 => Uint as u64, u64 => Uint as u64,
    f32 => Float as f64, f64 => Float as f64, bool => Bool as bool,
    String => Str as Cow<'static, str>, &'static str => Str as Cow<'static, str>,
);

impl From<usize> for ArgValue {
    fn from(v: usize) -> Self {
        Self::Uint(v as u64)
    }
}

impl From<isize> for ArgValue {
    fn from(v: isize) -> Self {
        Self::Int(v as i64)
    }
}

/// A zone location made at run time (for names only known then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicLocation {
    /// The zone's name.
    pub name: String,
    /// The enclosing function, if known (empty otherwise).
    pub function: Cow<'static, str>,
    /// The source file: where [`new`](Self::new) was called, unless set otherwise.
    pub file: Cow<'static, str>,
    /// The source line: where [`new`](Self::new) was called, unless set otherwise.
    pub line: u32,
    /// The zone's verbosity level.
    pub level: Verbosity,
    /// Key/value arguments of the zone, in the order given ([`arg`](Self::arg)).
    pub args: Vec<(Cow<'static, str>, ArgValue)>,
}

impl DynamicLocation {
    /// A location named `name`, at level `Fine`, at the file and line of the call (the
    /// function is left empty: [`dynamic_location!`](macro@crate::dynamic_location) fills it
    /// too). The file is a `&'static str`: nothing is allocated for it.
    ///
    /// ```
    /// use gpu_event_pool::DynamicLocation;
    /// let location = DynamicLocation::new(format!("dispatch {}", 3)).arg("m", 1024).arg("dtype", "f16");
    /// assert_eq!((location.file.as_ref(), location.line), (file!(), line!() - 1));
    /// assert_eq!(location.args.len(), 2);
    /// ```
    #[track_caller]
    pub fn new(name: impl Into<String>) -> Self {
        let caller = std::panic::Location::caller();
        Self {
            name: name.into(),
            function: Cow::Borrowed(""),
            file: Cow::Borrowed(caller.file()),
            line: caller.line(),
            level: Verbosity::Fine,
            args: Vec::new(),
        }
    }

    /// Adds a key/value argument (Chrome: the zone's `args`; Tracy: appended to the zone's
    /// name, `name (key=value, ...)`, as Tracy's GPU zones carry no text of their own).
    pub fn arg(mut self, key: impl Into<Cow<'static, str>>, value: impl Into<ArgValue>) -> Self {
        self.args.push((key.into(), value.into()));
        self
    }

    /// Sets the verbosity level.
    pub fn with_level(mut self, level: Verbosity) -> Self {
        self.level = level;
        self
    }

    /// Sets function, file and line.
    pub fn with_source(
        mut self,
        function: impl Into<Cow<'static, str>>,
        file: impl Into<Cow<'static, str>>,
        line: u32,
    ) -> Self {
        self.function = function.into();
        self.file = file.into();
        self.line = line;
        self
    }
}

/// Where a zone comes from: static (free to pass around) or dynamic (shared strings).
#[derive(Debug, Clone)]
pub enum Location {
    /// Made at compile time by [`location!`](macro@crate::location).
    Static(&'static SourceLocation),
    /// Made at run time.
    Dynamic(Arc<DynamicLocation>),
}

impl Location {
    /// The zone's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Static(l) => l.name,
            Self::Dynamic(l) => &l.name,
        }
    }
    /// The enclosing function.
    pub fn function(&self) -> &str {
        match self {
            Self::Static(l) => (l.function)(),
            Self::Dynamic(l) => &l.function,
        }
    }
    /// The source file.
    pub fn file(&self) -> &str {
        match self {
            Self::Static(l) => l.file,
            Self::Dynamic(l) => &l.file,
        }
    }
    /// The source line.
    pub fn line(&self) -> u32 {
        match self {
            Self::Static(l) => l.line,
            Self::Dynamic(l) => l.line,
        }
    }
    /// The verbosity level.
    pub fn level(&self) -> Verbosity {
        match self {
            Self::Static(l) => l.level,
            Self::Dynamic(l) => l.level,
        }
    }
    /// The zone's key/value arguments (none for a static location).
    pub fn args(&self) -> &[(Cow<'static, str>, ArgValue)] {
        match self {
            Self::Static(_) => &[],
            Self::Dynamic(l) => &l.args,
        }
    }
}

impl From<&'static SourceLocation> for Location {
    fn from(l: &'static SourceLocation) -> Self {
        Self::Static(l)
    }
}

impl From<Arc<DynamicLocation>> for Location {
    fn from(l: Arc<DynamicLocation>) -> Self {
        Self::Dynamic(l)
    }
}

impl From<DynamicLocation> for Location {
    fn from(l: DynamicLocation) -> Self {
        Self::Dynamic(Arc::new(l))
    }
}

/// Strips the helper item's name off a `type_name` path, leaving the enclosing function.
#[doc(hidden)]
pub fn __enclosing_function(path: &'static str) -> &'static str {
    let path = path.strip_suffix("::__gpu_event_pool_here").unwrap_or(path);
    path.strip_suffix("::{{closure}}").unwrap_or(path)
}

/// Makes a `&'static SourceLocation` for a zone, capturing name, function, file and line at
/// compile time. The level defaults to `Fine`.
///
/// ```
/// use gpu_event_pool::{location, Verbosity};
/// let dispatch = location!("dispatch");
/// let command_buffer = location!("command buffer", Verbosity::Coarse);
/// assert_eq!(dispatch.name, "dispatch");
/// assert_eq!(command_buffer.level, Verbosity::Coarse);
/// assert!((dispatch.function)().ends_with("main") || !(dispatch.function)().is_empty());
/// ```
#[macro_export]
macro_rules! location {
    ($name:expr) => {
        $crate::location!($name, $crate::Verbosity::Fine)
    };
    ($name:expr, $level:expr) => {{
        fn __gpu_event_pool_here() {}
        static LOCATION: $crate::SourceLocation = $crate::SourceLocation {
            name: $name,
            function: || {
                fn type_name_of<T>(_: T) -> &'static str {
                    ::core::any::type_name::<T>()
                }
                $crate::location::__enclosing_function(type_name_of(__gpu_event_pool_here))
            },
            file: file!(),
            line: line!(),
            level: $level,
        };
        &LOCATION
    }};
}

/// Makes a [`DynamicLocation`](crate::DynamicLocation) for a name known only at run time,
/// capturing the enclosing function, file and line as [`location!`](macro@crate::location)
/// does. The level defaults to `Fine`; add arguments with
/// [`arg`](crate::DynamicLocation::arg).
///
/// ```
/// use gpu_event_pool::{dynamic_location, Verbosity};
/// let layer = 7;
/// let location = dynamic_location!(format!("layer {layer}")).arg("layer", layer);
/// assert_eq!((location.name.as_str(), location.file.as_ref()), ("layer 7", file!()));
/// assert!(location.function.ends_with("main") || !location.function.is_empty());
/// let coarse = dynamic_location!(String::from("frame"), Verbosity::Coarse);
/// assert_eq!(coarse.level, Verbosity::Coarse);
/// ```
#[macro_export]
macro_rules! dynamic_location {
    ($name:expr) => {
        $crate::dynamic_location!($name, $crate::Verbosity::Fine)
    };
    ($name:expr, $level:expr) => {{
        fn __gpu_event_pool_here() {}
        fn type_name_of<T>(_: T) -> &'static str {
            ::core::any::type_name::<T>()
        }
        let function = $crate::location::__enclosing_function(type_name_of(__gpu_event_pool_here));
        $crate::DynamicLocation::new($name).with_level($level).with_source(function, file!(), line!())
    }};
}
