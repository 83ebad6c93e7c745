"""Tests of alf_env.tensor_specs."""

import pickle

import numpy as np
import pytest
import torch

from alf_env.tensor_specs import (
    BoundedTensorSpec,
    SpecBoundsError,
    TensorSpec,
    as_torch_dtype,
    numpy_dtype_to_torch,
    torch_dtype_to_numpy,
    torch_dtype_to_str,
)

INT64 = np.iinfo(np.int64)
NUM_SAMPLES = 4096


@pytest.mark.parametrize("dtype,expected", [
    (torch.float32, torch.float32),
    (np.float64, torch.float64),
    (np.dtype("int16"), torch.int16),
    ("uint8", torch.uint8),
    ("torch.int64", torch.int64),
    ("float32", torch.float32),
    (np.bool_, torch.bool),
])
def test_dtype_conversion(dtype, expected):
    spec = TensorSpec((2, ), dtype)
    assert spec.dtype == expected
    assert isinstance(spec.dtype, torch.dtype)
    assert as_torch_dtype(dtype) == expected


@pytest.mark.parametrize("torch_dtype,np_dtype", [
    (torch.float32, np.float32), (torch.float64, np.float64), (torch.float16, np.float16),
    (torch.int8, np.int8), (torch.uint8, np.uint8), (torch.int32, np.int32),
    (torch.int64, np.int64), (torch.bool, np.bool_),
])
def test_torch_numpy_dtype_round_trip(torch_dtype, np_dtype):
    assert torch_dtype_to_numpy(torch_dtype) == np.dtype(np_dtype)
    assert numpy_dtype_to_torch(np_dtype) == torch_dtype


def test_dtype_errors():
    with pytest.raises(TypeError, match="bfloat16 has no numpy equivalent"):
        torch_dtype_to_numpy(torch.bfloat16)
    with pytest.raises(TypeError, match="no torch equivalent"):
        numpy_dtype_to_torch(np.dtype("U3"))
    with pytest.raises(TypeError, match="not a numpy dtype"):
        TensorSpec((1, ), "not_a_dtype")


def test_tensor_spec_properties():
    spec = TensorSpec([2, 3], torch.int32)
    assert spec.shape == torch.Size([2, 3])
    assert isinstance(spec.shape, torch.Size)
    assert spec.ndim == 2
    assert spec.numel == 6
    assert spec.numpy_dtype == np.int32
    assert spec.is_discrete and not spec.is_continuous
    assert TensorSpec(()).dtype == torch.float32
    assert TensorSpec(()).shape == torch.Size([])
    assert not TensorSpec.is_bounded() and BoundedTensorSpec.is_bounded()


@pytest.mark.parametrize("outer_dims", [None, (), (4, ), (2, 5)])
def test_constructors(outer_dims):
    spec = TensorSpec((3, ), torch.int64)
    expected_shape = tuple(outer_dims or ()) + (3, )
    for value, tensor in [(0, spec.zeros(outer_dims)), (1, spec.ones(outer_dims)),
                          (7, spec.constant(7, outer_dims))]:
        assert torch.is_tensor(tensor)
        assert tensor.dtype == torch.int64 and tuple(tensor.shape) == expected_shape
        assert torch.all(tensor == value)
    for value, array in [(0, spec.numpy_zeros(outer_dims)),
                         (5, spec.numpy_constant(5, outer_dims))]:
        assert isinstance(array, np.ndarray)
        assert array.dtype == np.int64 and array.shape == expected_shape
        assert np.all(array == value)


def test_from_array_tensor_spec():
    array = np.zeros((4, 2, 3), dtype=np.uint8)
    assert TensorSpec.from_array(array) == TensorSpec((4, 2, 3), torch.uint8)
    assert TensorSpec.from_array(array, from_dim=1) == TensorSpec((2, 3), torch.uint8)
    assert TensorSpec.from_array(np.float32(1.0)) == TensorSpec((), torch.float32)
    tensor = torch.zeros(5, 6, dtype=torch.float64)
    assert TensorSpec.from_tensor(tensor, from_dim=1) == TensorSpec((6, ), torch.float64)
    bounded = BoundedTensorSpec((2, ), torch.int32, 0, 3)
    assert TensorSpec.from_spec(bounded) == TensorSpec((2, ), torch.int32)
    assert type(TensorSpec.from_spec(bounded)) is TensorSpec
    assert BoundedTensorSpec.from_spec(bounded) == bounded
    with pytest.raises(TypeError, match="expects a torch.Tensor"):
        TensorSpec.from_tensor(np.zeros(2))


def test_equality_and_hash():
    a = TensorSpec((2, ), torch.float32)
    assert a == TensorSpec([2], "float32")
    assert hash(a) == hash(TensorSpec([2], np.float32))
    assert a != TensorSpec((3, ))
    assert a != TensorSpec((2, ), torch.float64)
    assert a != BoundedTensorSpec((2, ), torch.float32, 0, 1)
    b = BoundedTensorSpec((2, ), torch.float32, 0, 1)
    assert b == BoundedTensorSpec((2, ), torch.float32, [0, 0], [1, 1])
    assert b != BoundedTensorSpec((2, ), torch.float32, 0, 2)
    assert b != BoundedTensorSpec((2, ), torch.float32, [0, -1], 1)
    assert len({a, TensorSpec((2, )), b}) == 2


@pytest.mark.parametrize("spec", [
    TensorSpec((3, 4), torch.uint8),
    BoundedTensorSpec((2, ), torch.float32, [-1.0, -np.inf], [1.0, np.inf]),
    BoundedTensorSpec((), torch.int64, INT64.min, INT64.max),
])
def test_pickle_round_trip(spec):
    loaded = pickle.loads(pickle.dumps(spec))
    assert loaded == spec
    assert type(loaded) is type(spec)
    assert hash(loaded) == hash(spec)


def test_repr():
    assert repr(TensorSpec((2, ), torch.int32)) == "TensorSpec(shape=(2,), dtype=torch.int32)"
    assert repr(BoundedTensorSpec((2, ), torch.int32, 0, 3)) == (
        "BoundedTensorSpec(shape=(2,), dtype=torch.int32, minimum=0, maximum=3)")


def test_bounds_keep_their_shape_as_in_alf_and_are_read_only():
    given = np.array([1.0, 2.0, 3.0])
    spec = BoundedTensorSpec((2, 3), torch.float32, [0.0], given)
    assert spec.minimum.shape == (1, ) and spec.maximum.shape == (3, )
    assert spec.maximum.dtype == np.float32
    given[0] = 9.0  # the spec holds a copy
    np.testing.assert_array_equal(spec.maximum, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="read-only"):
        spec.minimum[0] = 5
    assert spec == BoundedTensorSpec((2, 3), torch.float32, np.zeros((2, 3)),
                                     [[1.0, 2.0, 3.0]] * 2)
    sample = spec.numpy_sample((4, ), rng=np.random.default_rng(0))
    assert sample.shape == (4, 2, 3) and np.all(sample <= [1.0, 2.0, 3.0])


def test_replace_keeps_a_row_bound_for_a_new_leading_shape_as_in_alf():
    spec = BoundedTensorSpec((3, 4), torch.float32, -2.0, np.arange(1.0, 5.0))
    replaced = spec.replace(shape=(8, 4), minimum=np.full((4, ), -1))
    assert replaced.shape == (8, 4) and replaced.maximum.shape == (4, )
    np.testing.assert_array_equal(replaced.maximum, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(replaced.minimum, [-1.0] * 4)
    assert replaced.minimum.dtype == np.float32
    assert replaced.numpy_sample((2, )).shape == (2, 8, 4)
    with pytest.raises(ValueError, match=r"maximum with shape \(4,\) cannot be broadcast "
                                         r"to the spec shape \(8, 5\)"):
        spec.replace(shape=(8, 5))


def test_scalar_bounds_stay_scalar_as_in_alf():
    """ALF keeps a bound given as a scalar as a 0-d array."""
    spec = BoundedTensorSpec((2, 3), torch.float32, 0.0, [1.0, 2.0, 3.0])
    assert spec.minimum.shape == () and spec.maximum.shape == (3, )
    assert spec.minimum.dtype == np.float32 and not spec.minimum.flags.writeable
    default = BoundedTensorSpec((4, ), torch.int32)
    assert default.minimum.shape == () and default.maximum.shape == ()
    # Equal to the same bounds given at the full shape, hashes alike, and
    # samples and pickles at the full shape.
    full = BoundedTensorSpec((2, 3), torch.float32, np.zeros((2, 3)), [1.0, 2.0, 3.0])
    assert spec == full and hash(spec) == hash(full)
    assert spec != BoundedTensorSpec((2, 3), torch.float32, 0.5, [1.0, 2.0, 3.0])
    assert spec.numpy_sample((5, )).shape == (5, 2, 3)
    assert spec.sample().shape == (2, 3)
    assert pickle.loads(pickle.dumps(spec)).minimum.shape == ()


@pytest.mark.parametrize("dtype", [torch.float32, np.float32, "float32", np.dtype("float32")])
def test_torch_dtype_to_str_as_in_alf(dtype):
    assert torch_dtype_to_str(dtype) == "float32"
    assert torch_dtype_to_str(torch.uint8) == "uint8"
    assert TensorSpec((), torch.int64).dtype_str == "int64"


def test_replace_as_in_alf():
    spec = TensorSpec((2, ), torch.float32)
    assert spec.replace(shape=(3, )) == TensorSpec((3, ), torch.float32)
    assert spec.replace(dtype=torch.int64) == TensorSpec((2, ), torch.int64)
    assert spec.replace() == spec and spec.shape == (2, )
    bounded = BoundedTensorSpec((2, ), torch.float32, -1.0, [1.0, 2.0])
    assert bounded.replace(maximum=5.0) == BoundedTensorSpec((2, ), torch.float32, -1.0, 5.0)
    assert bounded.replace(shape=(4, ), maximum=3.0).shape == (4, )
    changed = bounded.replace(dtype=torch.float64, minimum=0.0)
    assert type(changed) is BoundedTensorSpec and changed.dtype == torch.float64
    np.testing.assert_array_equal(changed.maximum, [1.0, 2.0])
    assert changed.minimum.shape == ()
    with pytest.raises(ValueError, match="cannot be broadcast to the spec shape"):
        bounded.replace(shape=(3, ))  # the kept maximum [1, 2] does not fit


@pytest.mark.parametrize("dtype,low,high", [
    (torch.uint8, 0, 255),
    (torch.int8, -128, 127),
    (torch.int32, np.iinfo(np.int32).min, np.iinfo(np.int32).max),
    (torch.int64, INT64.min, INT64.max),
    (torch.bool, False, True),
])
def test_default_bounds_are_dtype_range(dtype, low, high):
    spec = BoundedTensorSpec((2, ), dtype)
    assert np.all(spec.minimum == low) and np.all(spec.maximum == high)


def test_default_float_bounds_are_unit_interval():
    spec = BoundedTensorSpec((2, ))
    assert spec.dtype == torch.float32
    assert np.all(spec.minimum == 0.0) and np.all(spec.maximum == 1.0)


@pytest.mark.parametrize("minimum,maximum,message", [
    (2, 1, r"minimum must be <= maximum, but at index \(0,\) minimum=2 > maximum=1"),
    ([0, 5], 3, r"at index \(1,\) minimum=5 > maximum=3"),
])
@pytest.mark.parametrize("caught", [ValueError, AssertionError, SpecBoundsError])
def test_minimum_greater_than_maximum_rejected(minimum, maximum, message, caught):
    """ALF raises AssertionError, alf_env raised ValueError: both catch it."""
    with pytest.raises(caught, match=message):
        BoundedTensorSpec((2, ), torch.int32, minimum, maximum)


@pytest.mark.parametrize("kwargs,message", [
    (dict(shape=(2, ), dtype=torch.uint8, minimum=-1, maximum=3),
     r"minimum=-1 is outside the range of dtype uint8"),
    (dict(shape=(2, ), dtype=torch.uint8, minimum=0, maximum=256),
     r"maximum=256 is outside the range of dtype uint8"),
    (dict(shape=(2, ), dtype=torch.float32, minimum=[0, 0, 0], maximum=1),
     r"minimum with shape \(3,\) cannot be broadcast to the spec shape \(2,\)"),
    (dict(shape=(), dtype=torch.float32, minimum=np.nan, maximum=1),
     r"minimum must not be NaN"),
    (dict(shape=(), dtype=torch.int32, minimum=-np.inf, maximum=1),
     r"minimum must be finite"),
])
def test_invalid_bounds_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BoundedTensorSpec(**kwargs)


def _assert_within(spec, values):
    values = np.asarray(values)
    assert values.dtype == spec.numpy_dtype
    assert np.all(values >= spec.minimum) and np.all(values <= spec.maximum)


@pytest.mark.parametrize("rng_factory", [
    lambda: np.random, lambda: np.random.RandomState(0), lambda: np.random.default_rng(0)
])
def test_uint8_full_range_sampling_reaches_255(rng_factory):
    spec = BoundedTensorSpec((NUM_SAMPLES, ), torch.uint8, 0, 255)
    sample = spec.numpy_sample(rng=rng_factory())
    _assert_within(spec, sample)
    assert sample.max() == 255 and sample.min() == 0
    tensor = spec.sample()
    assert tensor.dtype == torch.uint8 and int(tensor.max()) == 255


def test_inclusive_small_integer_range():
    spec = BoundedTensorSpec((NUM_SAMPLES, ), torch.int32, 3, 4)
    assert set(np.unique(spec.numpy_sample(rng=np.random.RandomState(1)))) == {3, 4}
    assert set(spec.sample().unique().tolist()) == {3, 4}


@pytest.mark.parametrize("rng", [np.random.RandomState(2), np.random.default_rng(2)])
def test_int64_extremes_sampling(rng):
    spec = BoundedTensorSpec((NUM_SAMPLES, ), torch.int64, INT64.min, INT64.max)
    sample = spec.numpy_sample(rng=rng)
    _assert_within(spec, sample)
    assert sample.min() < 0 < sample.max()
    top = BoundedTensorSpec((8, ), torch.int64, INT64.max, INT64.max)
    assert np.all(top.numpy_sample(rng=rng) == INT64.max)
    assert torch.all(top.sample() == INT64.max)


def test_per_element_integer_bounds():
    spec = BoundedTensorSpec((3, ), torch.int64, [0, 10, 100], [1, 11, 101])
    sample = spec.numpy_sample((NUM_SAMPLES, ), np.random.RandomState(3))
    assert sample.shape == (NUM_SAMPLES, 3)
    for column, low in enumerate([0, 10, 100]):
        assert set(np.unique(sample[:, column])) == {low, low + 1}
    _assert_within(spec, spec.sample((5, )).numpy())


def test_bool_sampling():
    spec = BoundedTensorSpec((NUM_SAMPLES, ), torch.bool)
    sample = spec.numpy_sample(rng=np.random.RandomState(4))
    assert sample.dtype == np.bool_ and sample.any() and not sample.all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_float_sampling_within_bounds(dtype):
    spec = BoundedTensorSpec((NUM_SAMPLES, ), dtype, -2.0, 3.0)
    _assert_within(spec, spec.numpy_sample(rng=np.random.RandomState(5)))
    tensor = spec.sample((2, ))
    assert tensor.dtype == dtype and tuple(tensor.shape) == (2, NUM_SAMPLES)
    _assert_within(spec, tensor.numpy())


@pytest.mark.parametrize("low,high", [
    (-np.inf, np.inf), (0.0, np.inf), (-np.inf, -5.0),
    (np.finfo(np.float32).min, np.finfo(np.float32).max),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_sampling_unbounded_is_finite(low, high, dtype):
    spec = BoundedTensorSpec((NUM_SAMPLES, ), dtype, low, high)
    for sample in (spec.numpy_sample(rng=np.random.RandomState(6)), spec.sample().numpy()):
        assert np.all(np.isfinite(sample))
        _assert_within(spec, sample)


def test_float64_full_range_is_finite():
    info = np.finfo(np.float64)
    spec = BoundedTensorSpec((NUM_SAMPLES, ), torch.float64, info.min, info.max)
    sample = spec.numpy_sample(rng=np.random.default_rng(7))
    assert np.all(np.isfinite(sample)) and sample.min() < 0 < sample.max()


def test_sampling_is_reproducible():
    spec = BoundedTensorSpec((16, ), torch.float32, -1, 1)
    a = spec.numpy_sample(rng=np.random.RandomState(8))
    b = spec.numpy_sample(rng=np.random.RandomState(8))
    np.testing.assert_array_equal(a, b)
    torch.manual_seed(9)
    c = spec.sample()
    torch.manual_seed(9)
    assert torch.equal(c, spec.sample())


def test_sample_outer_dims_shape():
    spec = BoundedTensorSpec((2, 3), torch.int32, 0, 5)
    assert tuple(spec.sample((4, )).shape) == (4, 2, 3)
    assert spec.numpy_sample((1, 4)).shape == (1, 4, 2, 3)
    assert spec.numpy_sample().shape == (2, 3)


# ----- fast paths -----------------------------------------------------------------

@pytest.mark.parametrize("torch_dtype", [torch.bool, torch.uint8, torch.int8, torch.int16,
                                         torch.int32, torch.int64, torch.float16,
                                         torch.float32, torch.float64, torch.complex64])
def test_numpy_dtype_matches_torch_dtype_to_numpy(torch_dtype):
    spec = TensorSpec((1, ), torch_dtype)
    assert spec.numpy_dtype == torch_dtype_to_numpy(torch_dtype)
    assert spec.numpy_dtype == torch_dtype_to_numpy(str(torch_dtype))
    assert isinstance(spec.numpy_dtype, np.dtype)


def test_numpy_dtype_without_numpy_equivalent_still_raises():
    spec = TensorSpec((1, ), torch.bfloat16)
    with pytest.raises(TypeError, match="has no numpy equivalent"):
        _ = spec.numpy_dtype


@pytest.mark.parametrize("outer_dims,expected", [
    (None, (2, 3)), ((), (2, 3)), ([], (2, 3)), (np.array([], dtype=np.int64), (2, 3)),
    ((4, ), (4, 2, 3)), ([1, 2], (1, 2, 2, 3)), (np.array([5]), (5, 2, 3)),
])
def test_outer_dims_forms(outer_dims, expected):
    spec = BoundedTensorSpec((2, 3), torch.int64, 0, 5)
    assert spec.numpy_zeros(outer_dims).shape == expected
    assert tuple(spec.zeros(outer_dims).shape) == expected
    assert spec.numpy_sample(outer_dims, np.random.RandomState(0)).shape == expected


@pytest.mark.parametrize("dtype,minimum,maximum", [
    (torch.float32, [-1.0, 0.0], [1.0, np.inf]),
    (torch.float64, -np.inf, np.inf),
    (torch.int64, [0, -5], [3, 5]),
    (torch.uint8, 0, 255),
    (torch.bool, None, None),
])
@pytest.mark.parametrize("rng_factory", [np.random.RandomState, np.random.default_rng])
def test_sampling_without_outer_dims_matches_broadcast_bounds(dtype, minimum, maximum,
                                                              rng_factory):
    # Without outer dims the bounds are used as they are, not broadcast: the
    # values must be those of the broadcasting path (outer dims (1,)).
    spec = BoundedTensorSpec((2, ), dtype, minimum, maximum)
    bounds = (spec.minimum.copy(), spec.maximum.copy())
    plain = spec.numpy_sample(None, rng_factory(5))
    broadcast = spec.numpy_sample((1, ), rng_factory(5))[0]
    np.testing.assert_array_equal(plain, broadcast)
    assert plain.dtype == broadcast.dtype == spec.numpy_dtype
    assert plain.flags.writeable
    np.testing.assert_array_equal(spec.minimum, bounds[0])
    np.testing.assert_array_equal(spec.maximum, bounds[1])
    assert not spec.minimum.flags.writeable and not spec.maximum.flags.writeable
