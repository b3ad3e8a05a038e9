//! Where a zone comes from: a name, the function, file and line, and its verbosity level.
//!
//! Static locations are made at compile time by [`location!`](macro@crate::location) and cost one
//! pointer per zone. Dynamic locations ([`DynamicLocation`]) carry run-time strings behind an
//! `Arc`: cloning one on the recording path is an atomic increment.

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

/// A zone location made at run time (for names only known then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicLocation {
    /// The zone's name.
    pub name: String,
    /// The enclosing function, if known.
    pub function: String,
    /// The source file, if known.
    pub file: String,
    /// The source line, 0 if unknown.
    pub line: u32,
    /// The zone's verbosity level.
    pub level: Verbosity,
}

impl DynamicLocation {
    /// A location with only a name, at level `Fine`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            function: String::new(),
            file: String::new(),
            line: 0,
            level: Verbosity::Fine,
        }
    }

    /// Sets the verbosity level.
    pub fn with_level(mut self, level: Verbosity) -> Self {
        self.level = level;
        self
    }

    /// Sets function, file and line.
    pub fn with_source(mut self, function: impl Into<String>, file: impl Into<String>, line: u32) -> Self {
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
