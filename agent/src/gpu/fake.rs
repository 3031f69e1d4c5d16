//! `FakeGpuSource`: a test double for hosts without a GPU. It is never used by
//! `darosd`; tests use it to drive the process-to-workload attribution.

use std::sync::{Arc, Mutex};

use super::{GpuReading, GpuSource};

/// A GPU source returning whatever the test put into it.
#[derive(Debug, Clone, Default)]
pub struct FakeGpuSource {
    readings: Arc<Mutex<Vec<GpuReading>>>,
}

impl FakeGpuSource {
    /// A fake with the given devices.
    pub fn new(readings: Vec<GpuReading>) -> Self {
        FakeGpuSource {
            readings: Arc::new(Mutex::new(readings)),
        }
    }

    /// Replaces the devices the fake reports.
    pub fn set(&self, readings: Vec<GpuReading>) {
        if let Ok(mut r) = self.readings.lock() {
            *r = readings;
        }
    }
}

impl GpuSource for FakeGpuSource {
    fn driver_version(&mut self) -> Option<String> {
        Some("fake".into())
    }

    fn read(&mut self) -> Result<Vec<GpuReading>, String> {
        self.readings
            .lock()
            .map(|r| r.clone())
            .map_err(|e| e.to_string())
    }
}
