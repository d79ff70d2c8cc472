//===- MegatronDatasets.h - train/valid/test GPTDatasets from .bin/.idx ---===//
//
// The control plane's datasets (runtime/control/Dataset.h) over Megatron indexed datasets: the
// --split ranges over each dataset's sequences, per split a GPTDataset (runtime/data/GPTDataset.h)
// of the number of samples the run needs, and for several datasets Megatron's BlendedDataset
// (runtime/data/BlendedDataset.h), in exactly Megatron's order.
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

/// Opens the indexed datasets of options.dataPath (Megatron's blend: "PREFIX" or "W1 PREFIX1 W2
/// PREFIX2 ..." or "PREFIX1 PREFIX2 ..."; PREFIX.bin and PREFIX.idx) and builds per split the
/// GPTDataset (one prefix, no weight) with options.numSamples samples (0: one epoch), or the
/// BlendedDataset of the prefixes' GPTDatasets (a split whose numSamples is 0 is not built for
/// valid/test); seed options.seed, samples of options.seqLength + 1 tokens. A sample whose tokens
/// are not below options.vocabSize is an error when it is read (Dataset::readSample).
/// Errors (InvalidArgument unless noted), naming the value: an entry ending in .bin or .idx (give
/// the prefix), parseBlend errors, the IndexedDataset::open errors, a --split that does not parse,
/// a seed outside [0, 2^32), a train split with no sequences or fewer tokens than one sample, a
/// blended dataset whose split is empty, a blend that takes more samples of a dataset than it
/// built, buildGptIndices errors.
absl::StatusOr<control::Datasets> buildIndexedDatasets(const control::DataOptions &options);

} // namespace trainc::rt::data

#endif
