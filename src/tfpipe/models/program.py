"""A SavedModel is a program: its saved_model.pb holds the TensorFlow ops that loading and serving it run, and an
op may read or write any file the process can (ReadFile, WriteFile, a print to `file://`), run Python (PyFunc) or
talk to other processes. `check(folder)` reads the program without loading or running it and refuses, in one
line naming the op and where it is, every op that is not on ALLOWED_OPS: ops that compute on tensors (math, nn,
arrays, strings, image decoding, lookup tables filled from the graph, control flow, variables). The checkpoint
ops (SAVER_OPS) are allowed only in the functions that the meta graph's saver alone calls (the traced save and
restore), never in a graph node, a serving signature or any function these call. What is refused and why:
docs/explanation/security.md#models; tests/test_model_programs.py attacks it."""

from __future__ import annotations

import re
from pathlib import Path

from tfpipe.errors import UserError

DOC = "docs/explanation/security.md#models"
SAVER_OPS = frozenset("SaveV2 RestoreV2 MergeV2Checkpoints ShardedFilename ShardedFilespec".split())
ALLOWED_OPS = frozenset(
    """
    Const Identity IdentityN NoOp Placeholder PlaceholderWithDefault StopGradient PreventGradient Snapshot
    EnsureShape CheckNumerics CheckNumericsV2 Assert GuaranteeConst
    PartitionedCall StatefulPartitionedCall If StatelessIf While StatelessWhile Case StatelessCase
    VarHandleOp ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp VarIsInitializedOp
    DestroyResourceOp DisableCopyOnRead ResourceGather ResourceGatherNd VariableShape
    HashTableV2 MutableHashTableV2 MutableDenseHashTableV2 AnonymousHashTable AnonymousMutableHashTable
    LookupTableFindV2 LookupTableImportV2 LookupTableInsertV2 LookupTableRemoveV2 LookupTableSizeV2
    LookupTableExportV2 InitializeTableV2
    Abs Acos Acosh Add AddN AddV2 All Any ApproximateEqual ArgMax ArgMin Asin Asinh Atan Atan2 Atanh
    BatchMatMul BatchMatMulV2 BatchMatMulV3 BiasAdd BiasAddV1 Bincount DenseBincount Bitcast BitwiseAnd
    BitwiseOr BitwiseXor Invert LeftShift RightShift Bucketize Cast Ceil ClipByValue Complex ComplexAbs Conj
    Cos Cosh Cross Cumprod Cumsum CumulativeLogsumexp Digamma Div DivNoNan Einsum Elu Equal Erf Erfc Erfinv
    Exp Expm1 Floor FloorDiv FloorMod Greater GreaterEqual Imag Inv IsFinite IsInf IsNan L2Loss LeakyRelu Less
    LessEqual Lgamma LinSpace Log Log1p LogSoftmax LogicalAnd LogicalNot LogicalOr MatMul Max Maximum Mean Min
    Minimum Mod Mul MulNoNan Neg NextAfter NotEqual OnesLike Pow Prod Range Real RealDiv Reciprocal Relu Relu6
    Rint Round Rsqrt Selu Sigmoid Sign Sin Sinh Softmax Softplus Softsign Sqrt Square SquaredDifference Sub
    Sum Tan Tanh TruncateDiv TruncateMod Xdivy Xlog1py Xlogy ZerosLike EuclideanNorm
    SegmentSum SegmentMean SegmentMax SegmentMin SegmentProd UnsortedSegmentSum UnsortedSegmentMax
    UnsortedSegmentMin UnsortedSegmentProd SparseSegmentSum SparseSegmentMean SparseSegmentSqrtN
    SparseSegmentSumWithNumSegments SparseSegmentMeanWithNumSegments SparseSegmentSqrtNWithNumSegments
    Cholesky MatrixInverse MatrixDeterminant LogMatrixDeterminant MatrixSolve MatrixTriangularSolve Qr Svd
    SelfAdjointEigV2 MatrixBandPart MatrixDiagV3 MatrixDiagPartV3 MatrixSetDiagV3 Diag DiagPart
    AvgPool AvgPool3D MaxPool MaxPoolV2 MaxPool3D MaxPoolWithArgmax Conv Conv2D Conv3D Conv2DBackpropInput
    Conv3DBackpropInputV2 DepthwiseConv2dNative Dilation2D FusedBatchNorm FusedBatchNormV2 FusedBatchNormV3
    LRN TopKV2 InTopKV2 NthElement FusedPadConv2D FusedResizeAndPadConv2D
    CudnnRNN CudnnRNNV2 CudnnRNNV3 CudnnRNNParamsToCanonical CudnnRNNParamsToCanonicalV2
    CudnnRNNCanonicalToParams CudnnRNNCanonicalToParamsV2
    BatchToSpaceND SpaceToBatchND DepthToSpace SpaceToDepth BroadcastTo BroadcastArgs BroadcastGradientArgs
    Concat ConcatV2 ConcatOffset ExpandDims ExtractImagePatches Fill Gather GatherNd GatherV2 Empty
    InvertPermutation ListDiff MirrorPad OneHot Pack Pad PadV2 Rank Reshape ReverseV2 ReverseSequence
    ScatterNd TensorScatterUpdate TensorScatterAdd TensorScatterSub TensorScatterMax TensorScatterMin Select
    SelectV2 Shape ShapeN Size Slice Split SplitV Squeeze StridedSlice TensorStridedSliceUpdate Tile Transpose
    Unique UniqueV2 UniqueWithCounts Unpack Where LowerBound UpperBound Roll UnravelIndex
    RaggedTensorToTensor RaggedTensorFromVariant RaggedTensorToVariant RaggedRange RaggedGather
    RaggedTensorToSparse RaggedCross RaggedBincount SparseToDense SparseTensorDenseMatMul SparseReshape
    SparseFillEmptyRows SparseReduceSum SparseConcat SparseSlice SparseAdd SparseCross SparseCrossHashed
    SparseCrossV2 SparseBincount
    TensorListFromTensor TensorListGetItem TensorListReserve TensorListSetItem TensorListStack
    TensorListElementShape TensorListLength TensorListPushBack TensorListPopBack TensorListConcatV2
    TensorListGather TensorListScatterIntoExistingList TensorListResize EmptyTensorList TensorListSplit
    TensorListScatterV2 TensorArrayV3 TensorArrayReadV3 TensorArrayWriteV3 TensorArrayGatherV3
    TensorArrayScatterV3 TensorArraySizeV3 TensorArrayConcatV3 TensorArraySplitV3 TensorArrayCloseV3
    StringJoin StringLower StringUpper StringSplit StringSplitV2 StringStrip StringLength StringToNumber
    StringToHashBucket StringToHashBucketFast StringToHashBucketStrong StringFormat AsString RegexFullMatch
    RegexReplace StaticRegexFullMatch StaticRegexReplace Substr UnicodeDecode UnicodeDecodeWithOffsets
    UnicodeEncode UnicodeScript UnicodeTranscode UnsortedSegmentJoin ReduceJoin StringNGrams EncodeBase64
    DecodeBase64 Fingerprint DecodeRaw DecodeCSV ParseExample ParseExampleV2 ParseSingleExample
    ParseSequenceExampleV2 ParseTensor SerializeTensor
    DecodeJpeg DecodePng DecodeImage DecodeBmp DecodeGif DecodeAndCropJpeg ExtractJpegShape EncodeJpeg
    EncodePng ResizeBilinear ResizeNearestNeighbor ResizeBicubic ResizeArea ScaleAndTranslate CropAndResize
    AdjustContrastv2 AdjustHue AdjustSaturation RGBToHSV HSVToRGB NonMaxSuppressionV3 NonMaxSuppressionV4
    NonMaxSuppressionV5 CombinedNonMaxSuppression ImageProjectiveTransformV3 DrawBoundingBoxesV2
    StatelessRandomUniformV2 StatelessRandomNormalV2 StatelessTruncatedNormalV2 StatelessRandomUniformIntV2
    StatelessRandomUniformFullIntV2 StatelessRandomGetKeyCounter StatelessRandomGetAlg
    StatelessRandomGetKeyCounterAlg StatelessRandomUniform StatelessRandomNormal StatelessRandomUniformInt
    RandomUniform RandomStandardNormal RandomUniformInt TruncatedNormal RandomShuffle
    FFT IFFT RFFT IRFFT FFT2D IFFT2D RFFT2D IRFFT2D FakeQuantWithMinMaxArgs FakeQuantWithMinMaxVars
    QuantizeV2 Dequantize
    """.split()
)
# Why an op outside ALLOWED_OPS is refused, by its name (the first pattern that matches; an op matching none is
# simply not one a model may run).
WHY = (
    (r"WriteFile|Save|Merge.*Checkpoints|Writer|Summary|Flush|ToTFRecord", "writes files"),
    (
        r"ReadFile|MatchingFiles|ImmutableConst|Reader|Dataset|TextFile|Restore|Load|Checkpoint|Remap",
        "reads files",
    ),
    (r"PyFunc", "runs Python"),
    (r"Print", "prints (to a file, too)"),
    (r"Send|Recv|Collective|Nccl|Remote|Rpc|TPU", "talks to other processes"),
    (r"Debug", "is a debugger hook"),
    (r"Proto", "reads protobuf descriptor files"),
)


def why(op: str) -> str:
    return next((reason for pattern, reason in WHY if re.search(pattern, op)), "is not an op a model may run")


def check(folder, where: str | None = None) -> None:
    """The SavedModel in `folder` runs only allowed ops; else UserError in one line, led by `where` (the folder by
    default), naming the first refused op and the function or graph node it is in."""
    for op, place in refused(read(folder, where)):
        raise UserError(f"{where or folder}: refused: op {op} in {place} {why(op)} (allowed ops: {DOC})")


def read(folder, where: str | None = None):
    """The SavedModel proto of `folder`/saved_model.pb (what TensorFlow loads when it is there), not run."""
    from tfpipe import tfstart

    tfstart.import_quietly()  # what predict and serve print stays theirs
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    path = Path(folder) / "saved_model.pb"
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(path.read_bytes())
    except (OSError, DecodeError) as exc:
        raise UserError(
            f"{where or folder}: refused: {path.name} unreadable ({type(exc).__name__})"
        ) from None
    return saved


def refused(saved) -> list:
    """(op, where) for every op of every meta graph outside what its place allows, graph nodes first."""
    found = []
    for meta in saved.meta_graphs:
        library = {f.signature.name: f for f in meta.graph_def.library.function}
        found += [
            (n.op, f"the graph (node {n.name})") for n in meta.graph_def.node if not _allowed(n.op, library)
        ]
        saver_only = _saver_only(meta, library)
        for name in sorted(library):
            extra = SAVER_OPS if name in saver_only else frozenset()
            found += [
                (n.op, f"function {name}")
                for n in library[name].node_def
                if not _allowed(n.op, library, extra)
            ]
    return found


def _allowed(op: str, library: dict, extra=frozenset()) -> bool:
    # an op named after a library function calls it (TensorFlow refuses a function named like a registered op)
    return op in ALLOWED_OPS or op in extra or op in library


def _saver_only(meta, library: dict) -> set:
    """The functions that only the saver's own graph nodes (saver_def's save and restore) reach: never one that a
    serving signature, another graph node, a loaded object's function or a gradient reaches, nor one that may
    stand in for another (`api_implements`: TensorFlow may swap such functions at run time)."""
    saver = {
        name.split(":")[0].lstrip("^")
        for name in (meta.saver_def.save_tensor_name, meta.saver_def.restore_op_name)
    }
    saver_roots: set[str] = set()
    program_roots: set[str] = set(meta.object_graph_def.concrete_functions)
    for node in meta.graph_def.node:
        (saver_roots if node.name in saver else program_roots).update(_calls(node, library))
    gradients = {g.function_name: g.gradient_func for g in meta.graph_def.library.gradient}
    program = _reach(program_roots, library, gradients)
    return {
        name
        for name in _reach(saver_roots, library, gradients) - program
        if "api_implements" not in library[name].attr
    }


def _reach(roots: set, library: dict, gradients: dict) -> set:
    seen, todo = set(), [name for name in roots if name in library]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        calls = set().union(*(_calls(node, library) for node in library[name].node_def))
        todo += [n for n in calls | {gradients.get(name)} if n in library and n not in seen]
    return seen


def _calls(node, library: dict) -> set:
    """The library functions a node calls: by its op, or named in any of its attributes (at any depth)."""
    names = {node.op} & library.keys()
    todo = list(node.attr.values())
    while todo:
        value = todo.pop()
        funcs = [value.func] if value.HasField("func") else list(value.list.func)
        for func in funcs:
            names.add(func.name)
            todo += list(func.attr.values())
    return names & library.keys()
