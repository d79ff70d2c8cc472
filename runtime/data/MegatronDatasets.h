//===- MegatronDatasets.h - train/valid/test GPTDatasets from .bin/.idx ---===//
//
// The control plane's datasets (runtime/control/Dataset.h) over one Megatron indexed dataset: the
// --split ranges over its sequences, and per split a GPTDataset (runtime/data/GPTDataset.h) of
// the number of samples the run needs, in exactly Megatron's order.
//
//===----------------------------------------------------------------------===//
#ifndef TRAINC_RUNTIME_DATA_MEGATRONDATASETS_H
#define TRAINC_RUNTIME_DATA_MEGATRONDATASETS_H

#include "runtime/control/Dataset.h"

#include <string>
#include <vector>

namespace trainc::rt::data {

/// Whether --data-path names Megatron indexed datasets: some entry P has a P.idx file.
bool isIndexedDataPath(const std::vector<std::string> &dataPath);

/// Opens the indexed dataset options.dataPath[0] (a prefix; PREFIX.bin and PREFIX.idx) and builds
/// the splits' GPTDatasets with options.numSamples samples each (0: one epoch), seed
/// options.seed, samples of options.seqLength + 1 tokens. A sample whose tokens are not below
/// options.vocabSize is an error when it is read (Dataset::readSample).
/// Errors (InvalidArgument unless noted), naming the value: more than one --data-path entry
/// (blending is not supported yet), an entry ending in .bin or .idx (give the prefix), the
/// IndexedDataset::open errors, a --split that does not parse, a seed outside [0, 2^32), a train
/// split with no sequences or fewer tokens than one sample, buildGptIndices errors.
absl::StatusOr<control::Datasets> buildIndexedDatasets(const control::DataOptions &options);

} // namespace trainc::rt::data

#endif
