//! Nearest-rank quantiles: the one definition behind every p50/p99 the project reports
//! (switch statistics, benchmarks).

/// The nearest-rank `q`-quantile (0 < q <= 1) of `sorted` (ascending): the smallest value
/// with at least `q` of the sample at or below it. `None` for an empty sample.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    Some(sorted[rank - 1])
}

/// p50, p99, max and mean of a sample, in its unit.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary<T> {
    pub count: usize,
    pub p50: T,
    pub p99: T,
    pub max: T,
    pub mean: f64,
}

/// Sample values: integers (nanoseconds) or floats (milliseconds).
pub trait Sample: Copy + PartialOrd {
    fn as_f64(self) -> f64;
}

impl Sample for i64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Sample for u64 {
    fn as_f64(self) -> f64 {
        self as f64
    }
}

impl Sample for f64 {
    fn as_f64(self) -> f64 {
        self
    }
}

/// Summarize `values` (sorted here). `None` for an empty sample.
pub fn summarize<T: Sample>(values: &mut [T]) -> Option<Summary<T>> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mean = values.iter().map(|&v| v.as_f64()).sum::<f64>() / values.len().max(1) as f64;
    Some(Summary {
        count: values.len(),
        p50: nearest_rank(values, 0.50)?,
        p99: nearest_rank(values, 0.99)?,
        max: *values.last()?,
        mean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_follows_its_definition() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(50));
        assert_eq!(nearest_rank(&v, 0.99), Some(99));
        assert_eq!(nearest_rank(&v, 1.0), Some(100));
        assert_eq!(nearest_rank(&v, 0.0), Some(1));
        assert_eq!(nearest_rank(&[7], 0.99), Some(7));
        assert_eq!(nearest_rank::<i64>(&[], 0.5), None);
        // Three values: the median is the second; p99 the third.
        assert_eq!(nearest_rank(&[1, 2, 3], 0.5), Some(2));
        assert_eq!(nearest_rank(&[1, 2, 3], 0.99), Some(3));
    }

    #[test]
    fn summaries_sort_first() {
        let mut v = vec![3.0, 1.0, 2.0, 10.0];
        let s = summarize(&mut v).unwrap();
        assert_eq!(
            (s.count, s.p50, s.p99, s.max, s.mean),
            (4, 2.0, 10.0, 10.0, 4.0)
        );
        assert!(summarize::<f64>(&mut []).is_none());
    }
}
